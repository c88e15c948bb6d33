"""operant-train's console output without --log-format (operant.trainer.services.status_line and
operant.trainer.services.progress.console_mode): one status line redrawn in place on a terminal, a
line a second elsewhere; the explicit formats as they were."""

import io
import os
import signal

import pytest
from test_record import make_record as record_of

from operant.trainer.services.progress import ProgressLog, console_mode
from operant.trainer.services.status_line import (
    ERASE_LINE,
    GuardedStream,
    StatusLine,
    duration,
    fit,
    status_fields,
)


def make_record(**changes):
    return record_of(**{"episode_return_mean": 1.0, **changes})


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    """A StringIO that says it is a terminal."""

    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        raise io.UnsupportedOperation("no descriptor")


def test_the_fields_say_steps_of_the_budget_return_time_left_and_rate():
    record = make_record(updates=61, global_step=124_928, sps_mean=12_492.8)
    record.episode_return_mean = 87.25
    assert status_fields(record, 249_856) == [
        "step 124,928/249,856 (50%)",
        "return 87.2",
        "ETA 0:10",  # 124,928 steps left at 12,492.8 steps/s
        "12,493 steps/s",
    ]
    record.episode_return_mean = None
    assert status_fields(record, 249_856)[1] == "return -"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0:00"), (7.4, "0:07"), (754, "12:34"), (3723, "1:02:03"), (float("nan"), "-")],
)
def test_durations_read_as_tqdm_writes_them(seconds, text):
    assert duration(seconds) == text


def test_a_narrow_terminal_drops_the_last_fields_before_cutting_the_first():
    fields = ["step 1,024/499,712 (0%)", "return 9.5", "ETA 0:02", "400,000 steps/s"]
    assert fit(fields, 200) == "  ".join(fields)
    assert fit(fields, 59) == "step 1,024/499,712 (0%)  return 9.5  ETA 0:02"
    assert fit(fields, 40) == "step 1,024/499,712 (0%)  return 9.5"
    assert fit(fields, 10) == "step 1,024"


def test_the_line_is_redrawn_in_place_at_most_ten_times_a_second():
    clock, terminal = Clock(), Terminal()
    line = StatusLine(terminal, 100 * 256, clock)
    for update in range(1, 101):  # 100 updates in 2 s: 50 a second
        clock.now = update * 0.02
        line.update(make_record(updates=update, global_step=update * 256, sps_mean=12_800.0))
    line.finish()
    out = terminal.getvalue()
    draws = out.split(ERASE_LINE)[1:]
    assert 19 <= len(draws) <= 22  # 10 a second for 2 s, and the last state at the end
    assert out.count("\n") == 1 and out.endswith("\n")  # one line, ended for what follows
    assert draws[-1] == "step 25,600/25,600 (100%)  return 1.0  ETA 0:00  12,800 steps/s\n"


def test_each_redraw_fits_the_terminal_as_it_is_now(monkeypatch):
    # No descriptor to ask (a StringIO): $COLUMNS, as shutil reads it, stands for the width.
    terminal = Terminal()
    line = StatusLine(terminal, 499_712)
    monkeypatch.setenv("COLUMNS", "100")
    line.update(make_record(updates=1, global_step=2_048, sps_mean=300_000.0))
    monkeypatch.setenv("COLUMNS", "40")  # narrowed, as after a SIGWINCH
    line.draw()
    wide, narrow = terminal.getvalue().split(ERASE_LINE)[1:]
    assert wide == "step 2,048/499,712 (0%)  return 1.0  ETA 0:02  300,000 steps/s"
    assert narrow == "step 2,048/499,712 (0%)  return 1.0"


def test_other_output_goes_above_the_line_which_is_drawn_again_below_it():
    terminal = Terminal()
    line = StatusLine(terminal, 1024)
    line.update(make_record(updates=1, global_step=512, sps_mean=512.0))
    stderr = GuardedStream(terminal, line)
    print("operant-train: warning: checkpoint of update 1 not written", file=stderr)
    assert terminal.getvalue() == (
        f"{ERASE_LINE}step 512/1,024 (50%)  return 1.0  ETA 0:01  512 steps/s"
        f"{ERASE_LINE}operant-train: warning: checkpoint of update 1 not written\n"
        f"{ERASE_LINE}step 512/1,024 (50%)  return 1.0  ETA 0:01  512 steps/s"
    )


def test_the_format_asked_for_is_kept_and_a_terminal_that_cannot_redraw_gets_lines():
    master, slave = os.openpty()
    try:
        with open(slave, "w", closefd=False) as tty:
            assert console_mode(None, tty, {"TERM": "xterm-256color"}) == "live"
            assert console_mode(None, tty, {"TERM": "dumb"}) == "sampled"
            assert console_mode("plain", tty, {"TERM": "xterm"}) == "plain"
            assert console_mode("json", tty, {"TERM": "xterm"}) == "json"
        assert console_mode(None, io.StringIO(), {"TERM": "xterm"}) == "sampled"
        assert console_mode("plain", io.StringIO(), {}) == "plain"
    finally:
        os.close(master)
        os.close(slave)


def _lines(tmp_path, fmt, seconds_apart, count=60):
    """What `fmt` prints for `count` updates `seconds_apart` apart."""
    clock, out = Clock(), io.StringIO()
    log = ProgressLog(tmp_path / "progress.jsonl", out, fmt, 1, count, False, clock=clock)
    for update in range(1, count + 1):
        clock.now = update * seconds_apart
        log(make_record(updates=update, global_step=update * 256))
    log.close()
    return out.getvalue().splitlines()


def test_without_a_terminal_a_line_a_second_at_most(tmp_path):
    lines = _lines(tmp_path, "sampled", 0.05)  # 60 updates in 3 s
    assert [line.split()[1] for line in lines] == ["20/60", "40/60", "60/60"]
    assert len((tmp_path / "progress.jsonl").read_text().splitlines()) == 60  # every record


def test_a_plain_format_asked_for_keeps_a_line_per_update(tmp_path):
    lines = _lines(tmp_path, "plain", 0.05)
    assert [line.split()[1] for line in lines] == [f"{update}/60" for update in range(1, 61)]


def test_a_stop_signal_line_erases_the_status_line_first(capfd):
    from operant.trainer.run.signals import StopSignals

    signals = StopSignals()
    signals.line_start = ERASE_LINE.encode()
    signals._handle(signal.SIGTERM, None)
    assert capfd.readouterr().err == (
        f"{ERASE_LINE}operant-train: SIGTERM: stopping at the next update boundary, with a "
        "checkpoint\n"
    )
