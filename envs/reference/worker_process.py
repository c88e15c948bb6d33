"""An env worker process's side (operant.envs.reference.workers is the trainer's): build its share
of the
envs, then answer the trainer's commands, writing its envs' outputs into their rows of the
shared block (operant.envs.reference.worker_block) until told to close.

Started as a fresh interpreter, `python -m operant.envs.reference.worker_process INDEX PARENT_PID
BLOCK_FD COMMAND_FD RESULT_FD`, never forked from a trainer with torch loaded; its spec (the
env id, its rows, the block's layout, the parent's sys.path) is the first message down its
command pipe. A worker that raises prints its traceback, sends `ERROR` and the exception as
text, and exits 1; it never outlives the trainer (PR_SET_PDEATHSIG, a check of its parent at
start, and end-of-file on its command pipe).
"""

from __future__ import annotations

import faulthandler
import json
import mmap
import os
import pickle
import signal
import sys
import traceback
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.vector import SyncVectorEnv

from operant.envs.reference.obs_rows import ObsRows, obs_rows
from operant.envs.reference.worker_block import (
    DONE,
    ERROR,
    LENGTH,
    RESET,
    STEP,
    WHERE_SIGNAL,
    BufferLayout,
    read_message,
    write_all,
)


def _die_with_parent(parent: int) -> None:
    """SIGKILL this process when its parent dies (Linux); exit now if it already has."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(0)


def worker_main(index: int, parent: int, block_fd: int, command_fd: int, result_fd: int) -> None:
    """A worker's life: read its spec, build its sub-envs, then answer commands until close.
    SIGINT and SIGTERM are ignored: a Ctrl-C or a service manager's stop reaches the whole
    process group, and the trainer, which decides when to stop, closes its workers itself."""
    _die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # Where a hung worker is: the trainer sends this before it ends one (its stack on the
    # trainer's stderr, written from C: also for a step stuck in C code that holds the GIL).
    faulthandler.register(WHERE_SIGNAL, file=sys.stderr, all_threads=False)
    try:
        message = read_message(command_fd)
        if message is None:
            return  # the parent is gone
        spec = json.loads(message)
        lo, hi = spec["lo"], spec["hi"]
        sys.path[:] = spec["sys_path"]
        layout = BufferLayout.from_json(spec["layout"])
        block = mmap.mmap(block_fd, layout.size)
        os.close(block_fd)
        views = {name: array[lo:hi] for name, array in layout.views(block).items()}
        if spec["module"]:
            import importlib

            importlib.import_module(spec["module"])
        vector = gymnasium.make_vec(
            spec["env_id"], num_envs=hi - lo, vectorization_mode="sync", **spec["kwargs"]
        )
        if not isinstance(vector, SyncVectorEnv):
            raise TypeError(f"make_vec gave a {type(vector).__name__}, not a SyncVectorEnv")
        space = vector.single_observation_space
        if not isinstance(space, spaces.Box):
            raise TypeError(f"its envs have {space} observations, not a Box")
        rows = obs_rows(space, vector.single_action_space)
        if rows.spec.shape != layout.obs_shape or rows.spec.dtype != np.dtype(layout.obs_dtype):
            raise TypeError(
                f"its envs' observations are {rows.spec.dtype} {rows.spec.shape} rows where the "
                f"trainer's first env's are {layout.obs_dtype} {layout.obs_shape}"
            )
        loop = _StepLoop(vector.envs, views, rows)
        write_all(result_fd, DONE)
        while True:
            command = os.read(command_fd, 1)  # end-of-file: the parent is gone
            if command == STEP:
                loop.step()
            elif command == RESET:
                payload = read_message(command_fd)
                if payload is None:
                    return
                loop.reset(*pickle.loads(payload))
            else:
                return
            write_all(result_fd, DONE)
    except Exception as error:
        # The traceback goes to the trainer's stderr (inherited), for whoever debugs the env;
        # the trainer's error names the worker and the exception in one line.
        # One write of the whole text, so two workers failing together do not interleave
        # their tracebacks line by line (os.write of a pipe or terminal is not split below
        # PIPE_BUF, and a worker's traceback is rarely longer).
        text_out = f"env worker {index} (pid {os.getpid()}):\n{traceback.format_exc()}"
        try:
            sys.stderr.flush()
            write_all(2, text_out.encode(errors="replace"))
        except OSError:
            pass  # no stderr to write to: the trainer still gets the one line below
        text = pickle.dumps(f"{type(error).__name__}: {error}")
        try:
            write_all(result_fd, ERROR + LENGTH.pack(len(text)) + text)
        except OSError:
            pass  # the parent is gone: nobody to tell
        sys.exit(1)


_SCALARS = (float, int, np.floating, np.integer)


def _check_reward(row: int, reward: Any) -> None:
    """A reward that is not a plain number: fine if it has shape (), else named (numpy's own
    error, "setting an array element with a sequence", named neither field nor env)."""
    shape = np.shape(np.asarray(reward))
    if shape != ():
        raise ValueError(
            f"its env {row} returned the reward {reward!r}: a reward is one number "
            f"(shape (), not {shape})"
        )


class _StepLoop:
    """A worker's sub-envs over its rows of the shared buffers: SyncVectorEnv's SAME_STEP
    loop, writing each env's outputs in place."""

    def __init__(self, envs: list[gymnasium.Env], views: dict[str, np.ndarray], rows: ObsRows):
        self.envs = envs
        self.rows = rows
        self.actions = views["actions"]
        self.obs = views["obs"]
        self.final_obs = views["final_obs"]
        self.rewards = views["rewards"]
        self.rewards64 = views["rewards64"]
        self.terminated = views["terminated"]
        self.truncated = views["truncated"]

    def reset(self, seeds: list[int | None], options: dict[str, Any] | None) -> None:
        for row, (env, seed) in enumerate(zip(self.envs, seeds, strict=True)):
            obs, _ = env.reset(seed=seed, options=options)
            self.obs[row] = self._row(row, obs)

    def _row(self, row: int, obs: Any) -> np.ndarray:
        try:
            return self.rows.row(obs)
        except ValueError as error:
            raise ValueError(f"its env {row} returned {error}") from None

    def step(self) -> None:
        rewards, terminated, truncated = [], [], []
        for row, env in enumerate(self.envs):
            obs, reward, term, trunc, _ = env.step(self.actions[row])
            if not isinstance(reward, _SCALARS):  # the common case: no array made a step
                _check_reward(row, reward)
            if term or trunc:
                self.final_obs[row] = self._row(row, obs)
                obs, _ = env.reset()
            self.obs[row] = self._row(row, obs)
            rewards.append(reward)
            terminated.append(term)
            truncated.append(trunc)
        self.rewards64[:] = rewards
        self.rewards[:] = self.rewards64
        self.terminated[:] = terminated
        self.truncated[:] = truncated


if __name__ == "__main__":
    worker_main(*(int(argument) for argument in sys.argv[1:6]))
