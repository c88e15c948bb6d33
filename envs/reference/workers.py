# their own): building, waiting with deadlines, failures, the Gymnasium API.
"""Gymnasium's Python envs stepped in worker processes (`env.workers = W`), behind the same
buffer interface as the in-process reference implementation (operant.envs.reference.vector).

Layout: one block of shared memory holds every buffer of the env contract; the env's own
`obs`, `rewards`, ... ARE views of it, and worker w writes its rows `lo_w:hi_w` in place
(operant.envs.reference.worker_block).

Synchronisation: each worker has a command pipe and a result pipe, and a step is one byte
each way (`b"S"` down, `b"."` back), read with a blocking read: a waiting process sleeps, and
the pipe's system calls order the shared-memory writes on every CPU. PufferLib's
multiprocessing backend instead spins on a flag byte per worker in shared memory, which pays
when every process has a core of its own; on a 2-core machine shared with the trainer's
policy, spinning (on non-blocking reads, for 10 to 200 us before sleeping) made a step 1.4x to
14x slower than sleeping at once (docs/journal/issue-15-env-workers.md), so nothing here spins.

Failures: a worker that raises sends `b"E"` and its exception as text (pickled once, on the
error path only) and exits; the env raises `EnvWorkerError` naming the worker, its envs and
the exception. A worker that dies without a word (SIGKILL, a segfault in an extension) closes
its end of the result pipe: the wait sees end-of-file at once and raises the same error with
the signal or exit status. Workers never outlive the trainer: each asks Linux to SIGKILL it
when its parent dies (prctl PR_SET_PDEATHSIG), checks at start that its parent is still the
one that started it, and exits when its command pipe reaches end-of-file (the parent's end
closes when the parent dies, on every platform).

Workers are started as fresh interpreters (`python -m operant.envs.reference.worker_process`), never
forked: the trainer has torch loaded and threads running. They import numpy and Gymnasium, and the
module of a `"package.module:Id"` env id; the parent's `sys.path` is passed on.

Semantics are the reference impl's, exactly: SAME_STEP autoreset, env i seeded with seed + i
(a list of seeds: env i gets seed[i]), the same sub-envs built by `gymnasium.make_vec`, and
the episode statistics reduced by the same numpy accounting in the trainer's process, so a
W-worker run's trajectories and statistics equal the in-process run's for the same seed and
actions.
"""

from __future__ import annotations

import json
import math
import mmap
import os
import pickle
import signal
import subprocess
import sys
import time
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv

from operant.envs.contract import FLAT_BOX_HINT, ActSpec, NotCopyable, RowLayout
from operant.envs.face.autoreset import autoreset_mode as parse_autoreset_mode
from operant.envs.face.episodes import AccountedPythonEnv, EpisodeAccounting
from operant.envs.face.seeding import check_seed, seed_np_random
from operant.envs.native.vector import load_actions, step_outputs
from operant.envs.reference.obs_rows import obs_rows
from operant.envs.reference.step_deadline import STOPS, WATCH_SLICE_S
from operant.envs.reference.worker_block import (
    CLOSE,
    DONE,
    ERROR,
    LENGTH,
    RESET,
    STEP,
    WHERE_SIGNAL,
    BufferLayout,
    read_message,
    readable,
    shared_fd,
    write_all,
)
from operant.envs.registry import (
    EnvError,
    EnvFailedError,
    InvalidActionError,
    invalid_action_message,
)

RECENT_CAPACITY = 1024
CLOSE_TIMEOUT_S = 2.0
"""How long `close()` lets workers exit on their own before it kills them."""


class EnvWorkerError(EnvFailedError):
    """An env worker process raised or died; the message names it, its envs and why (a worker
    that raised has printed its traceback itself: this error has no `__cause__`).

    A trainer ends the run as failed with this one line (operant.trainer.services.protocol:
    the metrics file says why, the last checkpoint is kept), not with a traceback."""


def split_rows(num_envs: int, workers: int) -> list[tuple[int, int]]:
    """Rows (lo, hi) of each worker: an even split, the first ones one env larger."""
    base, extra = divmod(num_envs, workers)
    bounds, lo = [], 0
    for index in range(workers):
        hi = lo + base + (index < extra)
        bounds.append((lo, hi))
        lo = hi
    return bounds


def _spaces(env_id: str, kwargs: dict[str, Any]) -> tuple[spaces.Space, spaces.Space]:
    """One env's observation and action spaces, read in this process (which also refuses an
    unknown id or a missing package before any worker starts)."""
    env = gymnasium.make(env_id, **kwargs)
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


# -- the trainer's side --------------------------------------------------------------------------
WHERE_WAIT_S = 0.2
"""How long a hung worker is given to write its stack (faulthandler writes it at once)."""


def _check_workers(workers: int, num_envs: int, autoreset_mode: AutoresetMode | str) -> None:
    """Refuse (EnvError) an autoreset mode workers do not run, or a worker count that leaves a
    worker without an env or an env without a worker."""
    if parse_autoreset_mode(autoreset_mode) != AutoresetMode.SAME_STEP:
        raise EnvError("env workers autoreset SAME_STEP only; use workers = 1 for NEXT_STEP")
    if not 1 <= workers <= num_envs:
        raise EnvError(
            f"env.workers = {workers} must be between 1 and env.num_envs = {num_envs} "
            "(each worker steps at least one env)"
        )


def _worker_kwargs(
    env_kwargs: dict[str, Any] | None, max_episode_steps: int | None
) -> dict[str, Any]:
    """The keywords each worker makes its envs with; EnvError where they cannot travel to the
    workers as JSON."""
    kwargs: dict[str, Any] = dict(env_kwargs or {})
    try:  # they travel to the workers as JSON
        json.dumps(kwargs)
    except (TypeError, ValueError) as error:
        raise EnvError(
            f"the env's keywords go to env workers as JSON, and {error}: give plain "
            "values (numbers, strings, lists, tables), or use env.workers = 1"
        ) from None
    if max_episode_steps is not None:
        kwargs["max_episode_steps"] = max_episode_steps
    return kwargs


class WorkerVectorEnv(NotCopyable, AccountedPythonEnv, VectorEnv):
    """`num_envs` copies of a Gymnasium env in `workers` processes, with the reference impl's
    semantics and buffers (operant.envs.contract.BatchEnv), the buffers in shared memory."""

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}
    impl = "reference"
    resumable = False  # Gymnasium's envs keep arbitrary Python state: a resume re-seeds them

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        workers: int,
        copy: bool = True,
        max_episode_steps: int | None = None,
        autoreset_mode: AutoresetMode | str = AutoresetMode.SAME_STEP,
        step_timeout_s: float | None = None,
        env_kwargs: dict[str, Any] | None = None,
    ):
        self.step_timeout_s = step_timeout_s
        """How long a worker may take to answer (a step, a reset); None: as long as it takes."""
        _check_workers(workers, num_envs, autoreset_mode)
        self.closed = True  # until the workers run: close() then has nothing to do
        self._processes: list[subprocess.Popen[bytes]] = []
        self._commands: list[int] = []
        self._results: list[int] = []
        self._owed: list[int] = []
        """Workers whose answer to a command has not been read yet, in order."""
        kwargs = _worker_kwargs(env_kwargs, max_episode_steps)
        module, _, key = env_id.rpartition(":")
        key = key.removeprefix("operant/")
        try:
            obs_space, act_space = _spaces(key, kwargs)
        except gymnasium.error.Error as error:
            raise EnvError(f'unknown env id {env_id!r} for env.impl "reference": {error}') from None
        if not isinstance(obs_space, spaces.Box):
            raise EnvError(f"{env_id} has {obs_space} observations; {FLAT_BOX_HINT}")
        self.num_envs = num_envs
        self.workers = workers
        self.copy = copy
        self._describe_spaces(env_id, obs_space, act_space)
        self.layout = RowLayout(num_envs)
        self.episodes = EpisodeAccounting(self.layout, RECENT_CAPACITY)
        self.rows = split_rows(num_envs, workers)
        self._start_workers(module, key, kwargs)

    def _describe_spaces(self, env_id: str, obs_space: spaces.Box, act_space: spaces.Space) -> None:
        """The batch's spaces and specs, from one env's observation and action spaces."""
        num_envs = self.num_envs
        self.obs_rows = obs_rows(obs_space, act_space)
        self.single_observation_space = self.obs_rows.space
        self.single_action_space = act_space
        self.observation_space = gymnasium.vector.utils.batch_space(self.obs_rows.space, num_envs)
        self.action_space = gymnasium.vector.utils.batch_space(act_space, num_envs)
        self.obs_spec = self.obs_rows.spec
        try:
            self.act_spec = ActSpec.from_space(act_space)
        except TypeError as error:  # a space no policy here acts in: one line, not a traceback
            raise EnvError(f"{env_id}: {error}") from None
        self.discrete = isinstance(act_space, spaces.Discrete)

    def _start_workers(self, module: str, key: str, kwargs: dict[str, Any]) -> None:
        """Map the shared block, take the buffers as views of it, and start one worker process
        per row range; returns once each has built its envs. On any failure the workers started
        so far are closed and the error raised."""
        spec = self.obs_spec
        buffers = BufferLayout(
            self.num_envs, spec.shape, spec.dtype.str, self.act_spec.shape, self.discrete
        )
        fd = shared_fd(buffers.size)
        try:
            self._block = mmap.mmap(fd, buffers.size)
            views = buffers.views(self._block)
            self.actions = views["actions"]
            self.obs = views["obs"]
            self.final_obs = views["final_obs"]
            self.rewards = views["rewards"]
            self.terminated = views["terminated"]
            self.truncated = views["truncated"]
            self._rewards64 = views["rewards64"]
            self.closed = False
            for index, (lo, hi) in enumerate(self.rows):
                self._start(index, fd, buffers, module, key, lo, hi, kwargs)
            self._wait_all()  # each worker has built its envs (or its error is raised here)
        except BaseException:
            self.close()
            raise
        finally:
            os.close(fd)

    def _start(
        self,
        index: int,
        fd: int,
        buffers: BufferLayout,
        module: str,
        key: str,
        lo: int,
        hi: int,
        kwargs: dict[str, Any],
    ) -> None:
        command_read, command_write = os.pipe()
        result_read, result_write = os.pipe()
        # The command line says who the worker is (as `ps` shows it) and where its pipes
        # and the block are; the rest goes down its command pipe, the first message.
        fds = (fd, command_read, result_write)
        try:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "operant.envs.reference.worker_process",
                    str(index),
                    str(os.getpid()),
                ]
                + [str(number) for number in fds],
                pass_fds=fds,
                stdin=subprocess.DEVNULL,
            )
        except BaseException:
            for number in (command_write, result_read):
                os.close(number)
            raise
        finally:
            os.close(command_read)
            os.close(result_write)
        self._processes.append(process)
        self._commands.append(command_write)
        self._results.append(result_read)
        spec = {
            "module": module,
            "env_id": key,
            "lo": lo,
            "hi": hi,
            "kwargs": kwargs,
            "layout": buffers.to_json(),
            "sys_path": sys.path,
        }
        data = json.dumps(spec).encode()
        write_all(command_write, LENGTH.pack(len(data)) + data)
        self._owed.append(index)  # its "ready", once its envs are built

    # -- synchronisation -------------------------------------------------------------------
    def _send(self, command: bytes, payloads: list[bytes] | None = None) -> None:
        """Send `command` (with each worker's payload, if any) to every worker, once every
        answer still owed has been read (a wait cut short by an exception leaves some)."""
        self._wait_all()
        for index, fd in enumerate(self._commands):
            message = command
            if payloads is not None:
                message += LENGTH.pack(len(payloads[index])) + payloads[index]
            try:
                write_all(fd, message)
            except BrokenPipeError:
                self._fail(index, b"")
            self._owed.append(index)

    def _wait_all(self) -> None:
        """Until every worker has answered its last command: a one-byte read from each in turn
        (all of them must answer; a dead worker's pipe reads end-of-file), each within what
        is left of step_timeout_s when one is set, and within the stop grace once a stop
        signal came (operant.envs.reference.step_deadline)."""
        started = time.monotonic()
        deadline = None if self.step_timeout_s is None else started + self.step_timeout_s
        while self._owed:
            index = self._owed[0]
            if deadline is not None or STOPS.clock is not None:
                self._await(index, started, deadline)
            answer = os.read(self._results[index], 1)
            if answer != DONE:
                self._fail(index, answer)
            self._owed.pop(0)

    def _await(self, index: int, started: float, deadline: float | None) -> None:
        """Until worker `index` can be read; raises if the step's deadline passes, or when a
        stop signal came and the worker has not answered stop_grace_s after the later of the
        signal and the wait's start (a Python env's step that never returns would otherwise
        hold the stop, which waits for an update boundary, for good)."""
        fd = self._results[index]
        while True:
            until = deadline
            if STOPS.clock is not None:
                until = min(until or math.inf, time.monotonic() + WATCH_SLICE_S)
                stop = STOPS.clock()
                if stop is not None:
                    cut = max(started, stop[0]) + STOPS.grace_s
                    until = min(until, cut)
                    if time.monotonic() >= cut:
                        self._hung(
                            index,
                            f"within env.stop_grace_s = {STOPS.grace_s:g} s of "
                            f"{stop[1]}, so the run could not stop at an update boundary "
                            "(its env hangs, or needs a longer grace)",
                        )
            if readable(fd, until if until is not None else math.inf):
                return
            if deadline is not None and time.monotonic() >= deadline:
                self._hung(
                    index,
                    f"within env.step_timeout_s = {self.step_timeout_s:g} s (its env hangs, "
                    "or needs a longer timeout)",
                )

    def _hung(self, index: int, within: str) -> None:
        """Close the env (a worker that does not answer close is killed) and raise for worker
        `index`, which did not answer `within` (the limit it missed)."""
        name = self._worker_name(index)
        self._say_where(index, name)
        self.close()
        raise EnvWorkerError(f"{name} did not answer {within}")

    def _say_where(self, index: int, name: str) -> None:
        """Have hung worker `index` write its stack to stderr (WHERE_SIGNAL), under a line that
        says whose it is, before it is ended: the failure line names no file of the env's."""
        process = self._processes[index]
        if process.poll() is not None:
            return
        sys.stderr.write(f"operant-train: {name} does not answer; where it is:\n")
        sys.stderr.flush()
        try:
            os.kill(process.pid, WHERE_SIGNAL)
        except ProcessLookupError:
            return
        time.sleep(WHERE_WAIT_S)

    def _fail(self, index: int, answer: bytes) -> None:
        """Close the env and raise the error of worker `index`, which answered `answer`
        (an error, or end-of-file when it died) instead of done."""
        text = read_message(self._results[index]) if answer == ERROR else None
        name = self._worker_name(index)
        if text is not None:
            message = f"{name} failed: {pickle.loads(text)}"
        else:
            message = f"{name} died: {self._death(index)}"
        self.close()
        raise EnvWorkerError(message)

    def _death(self, index: int) -> str:
        """How worker `index`, whose pipe closed, ended."""
        try:
            status = self._processes[index].wait(CLOSE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return "it closed its pipe"
        if status < 0:
            return f"killed by signal {-status} ({signal.Signals(-status).name})"
        return f"exited with status {status}"

    def _worker_name(self, index: int) -> str:
        lo, hi = self.rows[index]
        envs = f"env {lo}" if hi - lo == 1 else f"envs {lo}-{hi - 1}"
        return f"env worker {index} (pid {self._processes[index].pid}, {envs})"

    # -- the env ----------------------------------------------------------------------------
    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ):
        """Reset every env: env i gets seed + i for an int seed, seed[i] for a list (the
        reference impl's rule, Gymnasium's); no seed draws each env's from the OS."""
        seed = check_seed(seed, self.num_envs)
        seed_np_random(self, seed)
        seeds = (
            [None] * self.num_envs
            if seed is None
            else [seed + i for i in range(self.num_envs)]
            if isinstance(seed, int)
            else seed
        )
        self._send(RESET, [pickle.dumps((seeds[lo:hi], options)) for lo, hi in self.rows])
        self._wait_all()
        self.episodes.reset_episodes()
        return (self.obs.copy() if self.copy else self.obs), {}

    def step(self, actions: Any) -> tuple[Any, ...]:
        load_actions(self, actions)
        self.step_bound()
        info: dict[str, Any] = {}
        done = self.terminated | self.truncated
        if done.any():
            info["final_obs"] = self.final_obs.copy() if self.copy else self.final_obs
            info["_final_obs"] = done
            info["final_info"], info["_final_info"] = {}, done
        return step_outputs(self, info)

    def step_bound(self) -> None:
        """Step every env with the actions in `self.actions`; outputs land in the buffers.
        An action outside the space raises InvalidActionError before any env moves."""
        self._check_actions()
        self._send(STEP)
        self._wait_all()
        self.episodes.record(self._rewards64, self.terminated, self.truncated)

    def _check_actions(self) -> None:
        actions, space = self.actions, self.single_action_space
        if isinstance(space, spaces.Discrete):
            bad = (actions < space.start) | (actions >= space.start + space.n)
        else:
            bad = ~np.isfinite(actions.reshape(self.num_envs, -1)).all(axis=1)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise InvalidActionError(
                invalid_action_message(self.single_action_space, row, actions[row].tolist())
            )

    def close_extras(self, **kwargs) -> None:
        """Ask every worker to exit, kill those that have not within CLOSE_TIMEOUT_S, and
        close the pipes. The shared block goes with its last mapping (the buffers' views)."""
        for fd in self._commands:
            try:
                os.write(fd, CLOSE)
            except OSError:
                pass  # already gone
        deadline = time.monotonic() + CLOSE_TIMEOUT_S
        for process in self._processes:
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for fd in self._commands + self._results:
            os.close(fd)
        self._commands, self._results, self._owed = [], [], []

    def close(self, **kwargs) -> None:
        if not self.closed:
            self.close_extras(**kwargs)
        self.closed = True
