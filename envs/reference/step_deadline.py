"""How a stop signal reaches a Python env's step that never returns.

A stop (SIGTERM, a first Ctrl-C) waits for an update boundary, and a hung env step never lets
one come: `systemctl stop` then waited out the unit's stop timeout and SIGKILLed the trainer.
The trainer's session says when the stop came (`watch_stops`); then
- an env worker's wait (operant.envs.reference.workers) ends `grace_s` after the later of the signal
  and the step's start, as a hung worker's;
- a step in the trainer's own process (`env_step()` around a Python env's step: env.workers
  = 1) is interrupted at the same moment, or `env.step_timeout_s` after it began where that
  is set (as a worker's wait ends then): SIGALRM's handler raises `EnvStepHung` where the
  env's Python code is (a loop, `time.sleep`, a socket wait), naming the file and line, and
  the env's face turns it into the env's failure (the run ends as failed, its last good
  checkpoint kept). A step stuck in C code that holds the GIL runs no handler, nor any
  other Python code (and an env may swallow even EnvStepHung and go on): LAST_RESORT_S
  after a limit armed before it got stuck (its env.step_timeout_s, armed as it starts; a
  stop taken before it began) faulthandler's own thread (C) writes every thread's stack
  ("Timeout (0:00:06)!") and ends the process, exit status 1, without the run's last line
  or metrics (a reader sees its process gone). A stop signal that comes while such a step
  is stuck is not even taken (its handler is Python): the service manager's stop timeout
  ends that process.

The alarm is armed only for a step with a limit (a timeout, or a stop that came), for the
moment the limit ends, and disarmed when a step with a timeout returns, so training without
either never sees a SIGALRM. Signals are the process's, so this is too; only the main thread
installs the handler (the one Python runs handlers in, and the one that steps the envs). A
SIGALRM handler and timer that were there before are put back by `watch_stops(None)` (the
timer is held while the envs are watched).
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import sysconfig
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any

STOP_GRACE_S = 30.0
"""env.stop_grace_s's default."""
STDERR_FD = 2
LAST_RESORT_S = 5.0
"""How long after a step's limit a process whose handler could not run (a step stuck in C
code that holds the GIL) is ended by faulthandler, with every thread's stack, exit status 1."""
WATCH_SLICE_S = 0.25
"""How often a worker's wait looks at the stop clock (a signal does not end a poll: Python
retries it)."""

StopClock = Callable[[], "tuple[float, str] | None"]
"""When the trainer's stop signal came (time.monotonic) and its name; None before one."""


class EnvStepHung(BaseException):
    """An env's step still running `grace_s` after a stop signal. A BaseException, as
    KeyboardInterrupt is, so that an env's own `except Exception` (a retry loop around a
    socket) does not swallow it."""


@dataclass
class StopWatch:
    clock: StopClock | None = None
    grace_s: float = STOP_GRACE_S
    since: float | None = None
    """When the trainer's own process entered the env step it is in (None: in none)."""
    doing: str = "step"
    """What the env is doing there: its step, reset or construction."""
    timeout_s: float | None = None
    """That step's own limit (env.step_timeout_s), or None."""
    previous: Any = None
    """SIGALRM's handler before ours, while ours is installed."""
    previous_timer: tuple[float, float, float] = (0.0, 0.0, 0.0)
    """The real-time timer before ours (seconds left, interval, when read): put back."""
    installed: bool = False

    def stop(self) -> tuple[float, str] | None:
        return None if self.clock is None else self.clock()


STOPS = StopWatch()


def watch_stops(clock: StopClock | None, grace_s: float = STOP_GRACE_S) -> None:
    """Have env steps in this process look at `clock` (None: stop looking, before and after
    the run trains): worker envs' waits, and the steps `env_step()` marks."""
    STOPS.clock, STOPS.grace_s = clock, grace_s
    if clock is not None:
        install()
    elif STOPS.installed:
        faulthandler.cancel_dump_traceback_later()
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, STOPS.previous or signal.SIG_DFL)
        STOPS.installed = False
        left, interval, read = STOPS.previous_timer
        if left > 0:  # another user of SIGALRM (pytest-timeout's, say) gets its timer back
            signal.setitimer(
                signal.ITIMER_REAL, max(left - (time.monotonic() - read), 1e-3), interval
            )


def set_grace(grace_s: float) -> None:
    """The run's env.stop_grace_s, once its config is read (the default until then)."""
    STOPS.grace_s = grace_s


def install() -> bool:
    """SIGALRM's handler, from the main thread (Python runs handlers there only); whether it
    is installed."""
    if not STOPS.installed and threading.current_thread() is threading.main_thread():
        STOPS.previous = signal.signal(signal.SIGALRM, _alarm)
        STOPS.previous_timer = (*signal.getitimer(signal.ITIMER_REAL), time.monotonic())
        STOPS.installed = True
    return STOPS.installed


def check_step_timeout(timeout_s: float | None) -> float | None:
    """`timeout_s` for steps in this process, with the handler installed; EnvError where it
    cannot be (not a positive number, or not the main thread)."""
    from operant.envs.registry import EnvError

    if timeout_s is None:
        return None
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
        raise EnvError(f"step_timeout_s must be a positive number of seconds, got {timeout_s!r}")
    if not install():
        raise EnvError(
            "step_timeout_s with the env in this process needs the main thread (a signal "
            "interrupts the step); step the env there, or in worker processes"
        )
    return float(timeout_s)


def stop_came() -> None:
    """The trainer took a stop signal (called from its handler): a step under way gets its
    deadline now."""
    _arm()


@contextlib.contextmanager
def env_step(timeout_s: float | None = None, doing: str = "step") -> Iterator[None]:
    """Mark a Python env's step (or reset, or construction: `doing`) in the trainer's own
    process: it is interrupted (EnvStepHung) `timeout_s` after its start where that is given,
    and once a stop came, `grace_s` after the later of the stop and its start."""
    STOPS.since, STOPS.timeout_s, STOPS.doing = time.monotonic(), timeout_s, doing
    _arm()
    try:
        yield
    finally:
        STOPS.since = None
        _disarm_last_resort()
        if timeout_s is not None and STOPS.installed:
            signal.setitimer(signal.ITIMER_REAL, 0)


def _limits() -> list[tuple[float, str]]:
    """(when, what was missed) for the step under way: its timeout, the stop's grace."""
    since, limits = STOPS.since, []
    if since is None:
        return []
    if STOPS.timeout_s is not None:
        limits.append((since + STOPS.timeout_s, f"env.step_timeout_s = {STOPS.timeout_s:g} s"))
    stop = STOPS.stop()
    if stop is not None:
        grace = f"env.stop_grace_s = {STOPS.grace_s:g} s of {stop[1]}"
        limits.append((max(stop[0], since) + STOPS.grace_s, grace))
    return limits


def _arm() -> None:
    """SIGALRM for when the step under way outlives its first limit, if it has one; and,
    LAST_RESORT_S later, faulthandler's exit with the stack, for a step that runs no
    handler (C code that holds the GIL: no Python code in the process can run then)."""
    limits = _limits()
    if STOPS.installed and limits:
        due = max(min(limits)[0] - time.monotonic(), 0.001)
        signal.setitimer(signal.ITIMER_REAL, due)
        # fd 2 itself: sys.stderr may be an object without a file descriptor (a notebook's)
        faulthandler.dump_traceback_later(due + LAST_RESORT_S, exit=True, file=STDERR_FD)


def _disarm_last_resort() -> None:
    if STOPS.installed:
        faulthandler.cancel_dump_traceback_later()


def _alarm(signum: int, frame: FrameType | None) -> None:
    limits, now = _limits(), time.monotonic()
    missed = [what for when, what in sorted(limits) if now >= when]
    if not missed:
        _arm()  # a later step than the one it was armed for, or none (then nothing)
        return
    took = now - (STOPS.since or now)
    STOPS.since = None
    # The last resort stays armed until the step has left env_step(): an env that swallows
    # even this BaseException and goes on is ended by it.
    where = f" at {_where(frame)}" if frame is not None else ""
    grace = "grace" in missed[0]
    cause = (
        "stopped"
        if not grace
        else "could not stop" + (" at an update boundary" if STOPS.doing == "step" else "")
    )
    raise EnvStepHung(
        f"still in its {STOPS.doing} after {took:.1f} s{where}, past {missed[0]} (the env "
        f"hangs, or needs a longer {'grace' if grace else 'timeout'}), so the run {cause}"
    )


def _where(frame: FrameType) -> str:
    """file:line in function of the innermost frame outside Python's standard library (a
    hang in `re` or `socket` names the env's line that called it)."""
    outside: FrameType | None = frame
    while outside is not None and outside.f_code.co_filename.startswith(_STDLIB):
        outside = outside.f_back
    where = outside or frame
    return f"{where.f_code.co_filename}:{where.f_lineno} in {where.f_code.co_name}"


_STDLIB = sysconfig.get_paths()["stdlib"] + os.sep
