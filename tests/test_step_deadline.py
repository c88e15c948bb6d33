"""operant.envs.reference.step_deadline in this process: a step marked by env_step() is interrupted
at
its limit (a timeout, or the grace after a stop) where its Python code is, even in a loop
that swallows every Exception; a step within its limits is not, and nothing is armed without
one. The end-to-end cases (a real trainer, SIGTERM, a hanging Gymnasium env) are in
tests/test_user_python_envs.py."""

from __future__ import annotations

import queue
import signal
import time

import pytest

from operant.envs.reference import step_deadline
from operant.envs.reference.step_deadline import EnvStepHung, env_step, watch_stops

# pytest-timeout's own limit by a thread: its default, SIGALRM, is what this module arms.
pytestmark = pytest.mark.timeout(120, method="thread")


@pytest.fixture
def stop():
    """A stop clock as the trainer's session gives one: (when, name) once `came` is set."""
    state: dict[str, float] = {}

    def clock():
        return (state["at"], "SIGTERM") if "at" in state else None

    def came() -> None:
        state["at"] = time.monotonic()
        step_deadline.stop_came()

    before = signal.getsignal(signal.SIGALRM)
    watch_stops(clock, grace_s=0.2)
    yield came
    watch_stops(None)
    assert signal.getsignal(signal.SIGALRM) == before
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_a_timer_and_handler_of_someone_elses_are_put_back():
    def theirs(signum, frame):
        raise AssertionError("their alarm should not go off in this test")

    previous = signal.signal(signal.SIGALRM, theirs)
    signal.setitimer(signal.ITIMER_REAL, 50.0)
    try:
        watch_stops(lambda: None)
        assert signal.getsignal(signal.SIGALRM) is not theirs
        with env_step(timeout_s=0.5):
            pass
        watch_stops(None)
        assert signal.getsignal(signal.SIGALRM) is theirs
        assert 49.0 < signal.getitimer(signal.ITIMER_REAL)[0] <= 50.0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def stubborn_sleep(seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            time.sleep(0.01)
        except Exception:
            pass


def test_a_step_outliving_the_grace_after_a_stop_is_interrupted_where_it_is(stop):
    started = time.monotonic()
    with pytest.raises(EnvStepHung) as raised, env_step():
        time.sleep(0.1)
        stop()  # as the signal handler calls it, mid-step
        stubborn_sleep(5.0)
    took = time.monotonic() - started
    assert 0.28 <= took < 2.0, took  # 0.1 s, then the 0.2 s grace
    message = str(raised.value)
    assert message.startswith("still in its step after 0.")
    assert "test_step_deadline.py" in message and "in stubborn_sleep, past " in message
    assert "env.stop_grace_s = 0.2 s of SIGTERM (the env hangs, or needs a longer grace)" in message


def test_steps_within_the_grace_go_on_and_a_later_step_gets_its_own(stop):
    stop()
    for _ in range(3):  # each step is timed from its own start
        with env_step():
            time.sleep(0.12)
    with pytest.raises(EnvStepHung), env_step():
        time.sleep(5.0)


def test_no_stop_no_timeout_nothing_is_armed(stop):
    with env_step():
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
        time.sleep(0.3)  # longer than the grace: no stop came


def test_a_step_timeout_interrupts_and_is_disarmed_after_a_step_that_returned(stop):
    with env_step(timeout_s=0.2):
        time.sleep(0.05)
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    with pytest.raises(EnvStepHung) as raised, env_step(timeout_s=0.2):
        stubborn_sleep(5.0)
    assert "past env.step_timeout_s = 0.2 s (the env hangs, or needs a longer timeout)" in str(
        raised.value
    )


def wait_forever() -> None:
    queue.Queue().get()  # threading's Condition.wait: Python code of the standard library


def test_a_hang_inside_the_standard_library_names_the_envs_line(stop):
    with pytest.raises(EnvStepHung) as raised, env_step(timeout_s=0.2):
        wait_forever()
    message = str(raised.value)
    assert "test_step_deadline.py:" in message and " in wait_forever, past " in message
