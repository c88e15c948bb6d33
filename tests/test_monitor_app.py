"""The monitor app driven by a pilot: every key and every state, against a fake source (views
built by hand) and against real metrics files read by the real source."""

import asyncio
import functools
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import msgspec
import pytest
from monitor_fixtures import FakeSource, Run, make_view, screen_text

from operant.monitor.app import HelpScreen, MonitorApp, RunPicker, choose_curves
from operant.monitor.source import ReaderSource, SourceFailed
from operant.monitor.widgets import BigNumber, Curve, MetricsTable, PhaseBar
from operant.shared.reader import MetricsReader
from operant.shared.runs import update_latest

HERE = Path(__file__).parent


def pilot_test(test):
    """Run an async test in its own event loop (no pytest plugin needed)."""

    @functools.wraps(test)
    def run(*args, **kwargs):
        asyncio.run(test(*args, **kwargs))

    return run


async def until(pilot, predicate, timeout_s=10.0):
    """Let the app run until predicate() holds; fail the test when it never does."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting; screen:\n{screen_text(pilot.app)}")
        await pilot.pause(0.02)


def big(app, name):
    return app.main.query_one(f"#{name}", BigNumber).text


def table_values(app):
    return {name: value for name, value, _ in app.main.query_one(MetricsTable).rows}


def banner(app):
    widget = app.main.query_one("#banner")
    return str(widget.render()) if widget.display else ""


# --- against a fake source ------------------------------------------------------------------


@pilot_test
async def test_shows_a_running_run_at_a_glance():
    source = FakeSource(make_view())
    app = MonitorApp(source)
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: app.view is not None and app.main.query(Curve))
        await pilot.pause()
        text = screen_text(app)
        for words in (
            "cartpole-20250615-120000-beef",
            "CartPole-v1",
            "● running",
            "up 12m34s",
            "pid 4242@trainer-host",
            "CPU 97%",
            "RSS 312 MiB",
            "heartbeat 400 ms ago",
            "update 120",
            "episode return 431.4",
            "update 65.1 ms:",
            "env 31%",
            "update 46%",
        ):
            assert words in text, words
        assert (big(app, "steps"), big(app, "sps"), big(app, "episodes"), big(app, "return")) == (
            "122,880",
            "40,100",
            "4,800",
            "431.4",
        )
        assert app.main.query_one("#return", BigNumber).border_subtitle == "94.7…459"
        assert app.main.query_one("#steps", BigNumber).border_subtitle == "of 512k (24%)"
        assert banner(app) == ""
        curves = {curve.id: len(curve.data) for curve in app.main.query(Curve)}
        assert curves == {
            f"curve-{name}": 120
            for name in (
                "episode_return_mean",
                "sps",
                "policy_loss",
                "value_loss",
                "entropy",
                "approx_kl",
            )
        }
        rows = table_values(app)
        assert {
            name: rows[name]
            for name in (
                "global_step",
                "rss_bytes",
                "phase_env_s",
                "grad_norm_p99",
                "optimizer_note",
            )
        } == {
            "global_step": "122,880",
            "rss_bytes": "312 MiB",
            "phase_env_s": "20 ms",
            "grad_norm_p99": "1.5",
            "optimizer_note": "adam, no decay",
        }
        assert len(rows) == len(make_view().columns) == 26
        assert "grad_norm_p99" in text and "adam, no decay" in text
        cells = {name: (value, unit) for name, value, unit in app.main.query_one(MetricsTable).rows}
        assert {
            name: cells[name]
            for name in ("cpu_percent", "rss_bytes", "phase_env_s", "episode_length_mean", "sps")
        } == {
            "cpu_percent": ("97%", ""),
            "rss_bytes": ("312 MiB", ""),
            "phase_env_s": ("20 ms", ""),
            "episode_length_mean": ("431.4", "steps"),
            "sps": ("40100", "1/s"),
        }
        for twice in ("97% %", "MiB bytes", "ms s"):
            assert twice not in text, twice
        assert source.started


@pytest.mark.parametrize("key", ["q", "ctrl+c"])
@pilot_test
async def test_q_or_ctrl_c_detaches_and_stops_the_source(key):
    # (Ctrl-C was Textual's notice, "Press ctrl+q to quit")
    source = FakeSource()
    app = MonitorApp(source)
    async with app.run_test() as pilot:
        await until(pilot, lambda: app.view is not None)
        await pilot.press(key)
        await until(pilot, lambda: not app.is_running)
    assert app.return_value == "cartpole-20250615-120000-beef"
    assert app.return_code == 0 and source.stopped


@pilot_test
async def test_p_pauses_the_screen_and_shows_the_newest_view_on_resume():
    source = FakeSource(make_view(updates=100))
    app = MonitorApp(source)
    async with app.run_test() as pilot:
        await until(pilot, lambda: app.view is not None)
        assert big(app, "steps") == "102k"  # 80 columns: the compact form
        await pilot.press("p")
        source.push(make_view(updates=110))
        source.push(make_view(updates=120))
        await pilot.pause(0.1)
        assert big(app, "steps") == "102k"
        assert "PAUSED (p resumes)" in screen_text(app)
        await pilot.press("p")
        await pilot.pause()
        assert big(app, "steps") == "123k"
        assert "PAUSED" not in screen_text(app)
        source.push(make_view(updates=130))
        await until(pilot, lambda: big(app, "steps") == "133k")


@pilot_test
async def test_question_mark_shows_help_and_escape_closes_it():
    app = MonitorApp(FakeSource())
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.view is not None)
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        text = screen_text(app)
        assert "detach: the run keeps training" in text and "stalled" in text
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)
        assert app.is_running


@pilot_test
async def test_r_lists_runs_and_enter_attaches_to_the_chosen_one():
    source = FakeSource()
    app = MonitorApp(source)
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: app.view is not None)
        await pilot.press("r")
        await pilot.pause()
        assert isinstance(app.screen, RunPicker)
        text = screen_text(app)
        for words in (
            "pendulum-20250615-123000-cafe",
            "Pendulum-v1",
            "crashed",
            "8,192",
            "cartpole-20250615-110000-aaaa",
            "finished",
            "500,000",
            "1h30m",
        ):
            assert words in text, words
        # Newest first, the cursor on the run being watched; one row up is the newer run.
        await pilot.press("up", "enter")
        await until(pilot, lambda: app.view.run_id == "pendulum-20250615-123000-cafe")
        assert source.attached == ["pendulum-20250615-123000-cafe"]
        assert not isinstance(app.screen, RunPicker)


@pilot_test
async def test_picking_a_run_while_paused_shows_the_picked_run():
    # A user paused (p), picked another run (r, up, enter) and kept seeing the run they left.
    source = FakeSource()
    app = MonitorApp(source)
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: app.view is not None)
        await pilot.press("p", "r")
        await until(pilot, lambda: isinstance(app.screen, RunPicker))
        await pilot.press("up", "enter")
        await until(pilot, lambda: app.view.run_id == "pendulum-20250615-123000-cafe")
        assert source.attached == ["pendulum-20250615-123000-cafe"] and not app.paused
        title = screen_text(app).splitlines()[0]
        assert "pendulum-20250615-123000-cafe" in title and "PAUSED" not in title
        assert big(app, "steps") == "10,240"


@pilot_test
async def test_enter_on_the_run_being_watched_keeps_it():
    source = FakeSource()
    app = MonitorApp(source)
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: app.view is not None)
        await pilot.press("r")
        await until(pilot, lambda: isinstance(app.screen, RunPicker))
        await pilot.press("enter")
        await until(pilot, lambda: not isinstance(app.screen, RunPicker))
        assert source.attached == [] and app.view.run_id == "cartpole-20250615-120000-beef"


@pilot_test
async def test_r_then_escape_keeps_the_run():
    source = FakeSource()
    app = MonitorApp(source)
    async with app.run_test() as pilot:
        await until(pilot, lambda: app.view is not None)
        await pilot.press("r")
        await pilot.pause()
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, RunPicker) and source.attached == []


@pilot_test
async def test_command_palette_attaches_to_a_run_by_name():
    source = FakeSource()
    app = MonitorApp(source)
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: app.view is not None)
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"attach to run pendulum")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await until(pilot, lambda: source.attached == ["pendulum-20250615-123000-cafe"])
        await until(pilot, lambda: app.view.run_id == "pendulum-20250615-123000-cafe")


@pilot_test
async def test_command_palette_opens_the_run_picker():
    app = MonitorApp(FakeSource())
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: app.view is not None)
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"another run")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, RunPicker))


@pytest.mark.parametrize(
    "changes, words, severity",
    [
        (
            dict(status="finished", state="finished", uptime_s=900.0),
            ["Run finished after 15m00s. These are its final values."],
            "information",
        ),
        (
            dict(status="finished", state="finished", interrupted=True, uptime_s=900.0),
            ["stopped on request (SIGINT/SIGTERM) after 15m00s"],
            "information",
        ),
        (
            dict(status="failed", state="failed", reason="non-finite loss at update 120"),
            ["Run FAILED after 12m34s: non-finite loss at update 120. These are its last values."],
            "error",
        ),
        (
            dict(status="crashed", heartbeat_age_s=75.0),
            [
                "Trainer CRASHED: pid 4242 is gone",
                "last heartbeat 1m15s ago",
                "These are its last values.",
            ],
            "error",
        ),
        (
            dict(status="stalled", heartbeat_age_s=12.0),
            ["STALLED: no heartbeat for 12s (expected every 1.00 s)"],
            "warning",
        ),
        (
            dict(problem="/runs/x/metrics.bin: is not an Operant metrics file (wrong magic)"),
            [
                "Cannot read the metrics file: /runs/x/metrics.bin: is not an Operant metrics file",
                "Showing the last values read. Retrying.",
            ],
            "error",
        ),
    ],
)
@pilot_test
async def test_states_are_said_plainly_and_the_last_values_stay(changes, words, severity):
    source = FakeSource(make_view())
    app = MonitorApp(source)
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: app.view is not None)
        source.push(make_view(**changes))
        await until(
            pilot, lambda: app.view.status == changes.get("status", "running") and banner(app)
        )
        await pilot.pause()
        text = " ".join(screen_text(app).split())
        for sentence in words:
            assert sentence in text, sentence
        assert app.main.query_one("#banner").has_class(severity)
        # The numbers are the last ones read, not blanks.
        assert big(app, "steps") == "122,880" and big(app, "return") == "431.4"


@pilot_test
async def test_waiting_for_a_metrics_file():
    view = make_view()
    waiting = msgspec.structs.replace(
        view,
        status="waiting",
        metrics={},
        columns=(),
        history={},
        process=None,
        pid=0,
        problem="the trainer has not created /runs/r/metrics.bin yet",
    )
    app = MonitorApp(FakeSource(waiting))
    async with app.run_test(size=(120, 30)) as pilot:
        await until(pilot, lambda: app.view is not None)
        await pilot.pause()
        text = screen_text(app)
        assert "Waiting: the trainer has not created /runs/r/metrics.bin yet." in text
        assert big(app, "steps") == "-" and "episode return  no data yet" in text
        assert "update phases: not timed yet" in text


@pilot_test
async def test_a_notice_is_shown_once():
    source = FakeSource(make_view())
    app = MonitorApp(source)
    async with app.run_test(size=(120, 30), notifications=True) as pilot:
        await until(pilot, lambda: app.view is not None)
        source.push(make_view(notice="following latest: switched to the newer run x"))
        await until(pilot, lambda: "switched to the newer run x" in screen_text(app))
        source.push(make_view())
        await pilot.pause(0.1)
        assert screen_text(app).count("switched to the newer run x") == 1
        # While paused the values wait, but news about the run is told at once, and once.
        await pilot.press("p")
        source.push(make_view(updates=130, notice="the metrics file was replaced"))
        await until(pilot, lambda: "the metrics file was replaced" in screen_text(app))
        assert big(app, "steps") == "122,880"
        await pilot.press("p")
        await until(pilot, lambda: big(app, "steps") == "133,120")
        assert screen_text(app).count("the metrics file was replaced") == 1


@pilot_test
async def test_resizes_down_to_80x24_and_below():
    app = MonitorApp(FakeSource(make_view(status="stalled", heartbeat_age_s=12.0)))
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: app.view is not None and app.main.query(Curve))
        for width, height in ((120, 40), (80, 24), (60, 20), (160, 48), (80, 24)):
            await pilot.resize_terminal(width, height)
            lines = (await settled(pilot)).splitlines()
            assert len(lines) == height and max(len(line) for line in lines) <= width
            text = "\n".join(lines)
            assert "cartpole-20250615-120000-beef" in lines[0]
            assert "q Detach" in lines[-1]
            assert "STALLED" in text
            assert app.main.query_one(PhaseBar).size.height >= 2
        # At 80x24 (with the banner) every part still has room: numbers, six curves of one or
        # two rows sharing the body's height, the table beside them.
        heights = [curve.size.height for curve in app.main.query(Curve)]
        assert min(heights) >= 1 and sum(heights) == app.main.query_one("#curves").size.height
        assert app.main.query_one(MetricsTable).size.height >= 8
        assert big(app, "steps") == "123k"


async def settled(pilot, timeout_s=10.0) -> str:
    """The screen once it is whole and still: its footer (the last line) drawn and two reads
    0.1 s apart the same. A fixed pause was not enough on a loaded CI machine, where a resized
    screen had not drawn its footer after 0.3 s."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    last = None
    while True:
        await pilot.pause(0.1)
        text = screen_text(pilot.app)
        if text == last and text.splitlines()[-1].strip():
            return text
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"the screen never settled:\n{text}")
        last = text


async def drawn_at(size, keys=()) -> str:
    """The screen of a monitor started at `size`, its first view drawn, after `keys`."""
    app = MonitorApp(FakeSource(make_view()))
    async with app.run_test(size=size) as pilot:
        await until(
            pilot,
            lambda: app.view is not None and all(curve.data for curve in app.main.query(Curve)),
        )
        await pilot.press(*keys)
        return await settled(pilot)


@pytest.mark.parametrize("keys", [(), ("r",)])
@pilot_test
async def test_after_a_resize_nothing_of_the_old_size_stays(keys):
    # A stray cell was reported after a resize: after each one, the screen is what a monitor
    # started at that size draws, cell for cell (with the run picker open, and once closed).
    app = MonitorApp(FakeSource(make_view()))
    async with app.run_test(size=(160, 48)) as pilot:
        await until(
            pilot,
            lambda: app.view is not None and all(curve.data for curve in app.main.query(Curve)),
        )
        await pilot.press(*keys)
        for size in ((80, 24), (123, 37), (160, 48)):
            await pilot.resize_terminal(*size)
            assert await settled(pilot) == await drawn_at(size, keys), size
        if keys:
            await pilot.press("escape")
            assert await settled(pilot) == await drawn_at((160, 48))


@pilot_test
async def test_a_source_bug_ends_the_app_with_its_traceback():
    source = FakeSource()
    app = MonitorApp(source)
    async with app.run_test() as pilot:
        await until(pilot, lambda: app.view is not None)
        app.post_message(SourceFailed("Traceback ...\nZeroDivisionError: division by zero"))
        await until(pilot, lambda: not app.is_running)
    assert app.return_code == 1


def test_curves_for_runs_that_record_other_fields():
    assert [name for name, _, _ in choose_curves(["global_step", "sps", "entropy"])] == [
        "sps",
        "entropy",
    ]
    assert [title for _, title, _ in choose_curves(["global_step", "reward_ema", "kl"])] == [
        "reward ema",
        "kl",
    ]
    assert choose_curves([]) == []


# --- against real metrics files ------------------------------------------------------------


def reader_app(root, run=None, follow=False):
    return MonitorApp(ReaderSource(root, run, follow=follow, interval_s=0.1))


@pilot_test
async def test_real_running_run_attached_late_shows_whole_curves(tmp_path):
    run = Run(tmp_path)
    run.writer.start_heartbeat()
    run.publish(40)
    app = reader_app(tmp_path)
    try:
        async with app.run_test(size=(160, 48)) as pilot:
            await until(pilot, lambda: app.view is not None and app.main.query(Curve))
            await until(pilot, lambda: len(app.main.query_one("#curve-sps", Curve).data) == 40)
            assert app.view.status == "running" and app.view.process.measured_by == "psutil"
            assert app.view.process.rss_bytes > 10 * 2**20
            assert big(app, "steps") == f"{40 * 1024:,}"
            run.publish(5)
            await until(pilot, lambda: big(app, "steps") == f"{45 * 1024:,}")
            assert len(app.main.query_one("#curve-episode_return_mean", Curve).data) == 45
            rows = table_values(app)
            assert rows["grad_norm_p99"] == "1.5" and rows["phase_update_s"] == "30 ms"
            assert len(rows) == len(run.schema.metrics) + len(run.schema.snapshot)
            assert "update 46%" in screen_text(app)
            assert banner(app) == ""
    finally:
        run.close()


@pytest.mark.parametrize(
    "end, words",
    [
        ("finish", "Run finished after"),
        ("fail", "Run FAILED after"),
    ],
)
@pilot_test
async def test_real_run_that_ends(tmp_path, end, words):
    run = Run(tmp_path)
    run.publish(10)
    app = reader_app(tmp_path)
    try:
        async with app.run_test(size=(120, 30)) as pilot:
            await until(pilot, lambda: app.view is not None and app.view.status == "running")
            if end == "finish":
                run.finish()
            else:
                run.fail("value loss is NaN at update 10")
            await until(pilot, lambda: words in banner(app))
            if end == "fail":
                assert "value loss is NaN at update 10" in banner(app)
            assert big(app, "steps") == "10,240"
    finally:
        run.close()


@pilot_test
async def test_real_run_crashed(tmp_path):
    subprocess.run(
        [sys.executable, str(HERE / "monitor_fixtures.py"), str(tmp_path), "gone", "crash", "12"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    app = reader_app(tmp_path)
    async with app.run_test(size=(120, 30)) as pilot:
        await until(pilot, lambda: app.view is not None and app.view.columns)
        assert app.view.status == "crashed"
        assert "Trainer CRASHED" in banner(app)
        assert big(app, "steps") == "12,288"


@pilot_test
async def test_real_run_stalled(tmp_path):
    run = Run(tmp_path, heartbeat_interval_s=0.05)  # no heartbeat thread: it stops at once
    run.publish(3)
    app = reader_app(tmp_path)
    try:
        async with app.run_test(size=(120, 30)) as pilot:
            await until(pilot, lambda: app.view is not None and app.view.status == "stalled")
            assert "STALLED: no heartbeat for" in banner(app)
            run.writer.start_heartbeat()  # it beats again: running
            await until(pilot, lambda: app.view.status == "running")
    finally:
        run.close()


@pilot_test
async def test_real_file_replaced_by_garbage_then_by_a_new_run(tmp_path):
    run = Run(tmp_path)
    run.writer.start_heartbeat()
    run.publish(10)
    app = reader_app(tmp_path)
    try:
        async with app.run_test(size=(160, 48), notifications=True) as pilot:
            await until(pilot, lambda: app.view is not None and big(app, "steps") == "10,240")
            garbage = tmp_path / "garbage"
            garbage.write_bytes(b"not a metrics file" * 300)
            os.replace(garbage, run.path)
            # The monitor may first see only that the file was replaced (its inode changed),
            # then, reopening it, that the new one is garbage: wait for the second.
            await until(pilot, lambda: "not an Operant metrics file" in banner(app))
            assert "Cannot read the metrics file" in banner(app)
            assert big(app, "steps") == "10,240"  # the last values stay
            assert "running (unreadable)" in screen_text(app)
            # A new run writes its file in the same place: read from its start.
            run.close()
            run.path.unlink()
            run.dir.rename(tmp_path / "old")
            fresh = Run(tmp_path, run.run_id)
            fresh.publish(2)
            await until(pilot, lambda: big(app, "steps") == "2,048")
            assert banner(app) == ""
            assert len(app.main.query_one("#curve-sps", Curve).data) == 2
            await until(pilot, lambda: "replaced by a new one" in screen_text(app))
            fresh.close()
    finally:
        run.close()


@pilot_test
async def test_real_run_directory_without_metrics_file_waits(tmp_path):
    (tmp_path / "early").mkdir()
    update_latest(tmp_path, "early")
    app = reader_app(tmp_path)
    async with app.run_test(size=(120, 30)) as pilot:
        await until(pilot, lambda: app.view is not None)
        assert "Waiting: the trainer has not created" in banner(app)
        assert app.view.status == "waiting"


@pilot_test
async def test_follow_latest_switches_to_a_newer_run(tmp_path):
    first = Run(tmp_path, "cartpole-1")
    first.publish(3)
    app = reader_app(tmp_path, follow=True)
    try:
        async with app.run_test(size=(120, 30), notifications=True) as pilot:
            await until(pilot, lambda: app.view is not None and app.view.run_id == "cartpole-1")
            assert "following latest" in screen_text(app)
            second = Run(tmp_path, "cartpole-2")
            second.publish(7)
            await until(pilot, lambda: app.view.run_id == "cartpole-2")
            assert big(app, "steps") == "7,168"
            assert len(app.main.query_one("#curve-sps", Curve).data) == 7
            await until(pilot, lambda: "switched to the newer run cartpole-2" in screen_text(app))
            second.close()
    finally:
        first.close()


@pilot_test
async def test_without_follow_latest_stays_on_its_run(tmp_path):
    first = Run(tmp_path, "cartpole-1")
    first.publish(3)
    app = reader_app(tmp_path, run="cartpole-1")
    try:
        async with app.run_test(size=(120, 30)) as pilot:
            await until(pilot, lambda: app.view is not None and app.view.columns)
            second = Run(tmp_path, "cartpole-2")
            await pilot.pause(0.3)
            assert app.view.run_id == "cartpole-1"
            assert "following" not in screen_text(app)
            second.close()
    finally:
        first.close()


@pilot_test
async def test_real_picker_attaches_to_another_run(tmp_path):
    first = Run(tmp_path, "cartpole-1")
    first.publish(3)
    second = Run(tmp_path, "cartpole-2", latest=False)
    second.publish(5)
    second.finish()
    app = reader_app(tmp_path, run="cartpole-1")
    try:
        async with app.run_test(size=(120, 30)) as pilot:
            await until(pilot, lambda: app.view is not None and app.view.columns)
            await pilot.press("r")
            await until(pilot, lambda: isinstance(app.screen, RunPicker))
            text = screen_text(app)
            assert "cartpole-2" in text and "finished" in text and "5,120" in text
            row = [r.run_id for r in app.screen.rows][::-1].index("cartpole-2")
            app.screen.query_one("#runs").move_cursor(row=row)
            await pilot.press("enter")
            await until(pilot, lambda: app.view.run_id == "cartpole-2")
            assert app.view.status == "finished" and big(app, "steps") == "5,120"
    finally:
        first.close()
        second.close()


@pilot_test
async def test_a_read_that_never_returns_freezes_neither_the_screen_nor_the_detach(tmp_path):
    """The source reads in a Textual thread worker: a read stuck on a slow disk (here one that
    waits for the test) leaves the screen answering keys, q detaches at once, and nothing
    waits for the stuck read (Textual runs thread workers in the loop's default executor,
    which asyncio.run joins at its end: the app's own lets the read keep its thread)."""
    run = Run(tmp_path)
    run.publish(3)
    source = ReaderSource(tmp_path, run.run_id, interval_s=0.05)
    stuck, release = threading.Event(), threading.Event()
    read, looks = source.poll, []

    def poll():
        looks.append(threading.current_thread())
        if len(looks) > 1:  # the first look, taken before the first paint, is answered
            stuck.set()
            release.wait(20)
        return read()

    source.poll = poll
    app = MonitorApp(source)
    loop = asyncio.get_running_loop()
    try:
        async with app.run_test() as pilot:
            await until(pilot, lambda: app.view is not None and stuck.is_set())
            assert looks[1] is not threading.main_thread()
            await pilot.press("p")
            await until(pilot, lambda: "PAUSED" in screen_text(app))
            await pilot.press("question_mark")
            await until(pilot, lambda: isinstance(app.screen, HelpScreen))
            await pilot.press("escape")
            await pilot.press("q")
            await until(pilot, lambda: not app.is_running)
        assert app.return_value == run.run_id and not release.is_set()
        await asyncio.wait_for(loop.shutdown_default_executor(), timeout=5)
    finally:
        release.set()
        run.close()
    # Once the read returns, the loop ends and closes its reader.
    deadline = time.monotonic() + 10
    while source._reader is not None:
        assert time.monotonic() < deadline, "the reader outlived the read"
        time.sleep(0.02)
    assert len(looks) == 2


def test_source_poll_reads_a_real_file_with_an_injected_clock(tmp_path):
    run = Run(tmp_path)
    run.publish(4)
    source = ReaderSource(tmp_path, clock=lambda: 2_000_000_000.0)
    try:
        view = source.poll()
        assert view.taken_at == 2_000_000_000.0
        assert view.metrics["global_step"] == 4096 and view.history_head == 4
        assert view.history["global_step"] == (1024.0, 2048.0, 3072.0, 4096.0)
        with MetricsReader(run.path) as reader:
            created_s = reader.created_wall_ns / 1e9
        assert view.uptime_s == pytest.approx(2_000_000_000.0 - created_s, abs=5.0)
        assert [c.name for c in view.columns][:3] == ["global_step", "episodes", "updates"]
        run.publish(1)
        assert source.poll().history["global_step"][-1] == 5120.0
    finally:
        source.stop()
        run.close()


@pilot_test
async def test_real_command_palette_attaches_to_a_run_by_name(tmp_path):
    first = Run(tmp_path, "cartpole-1")
    first.publish(3)
    second = Run(tmp_path, "pendulum-2", latest=False)
    second.publish(6)
    app = reader_app(tmp_path, run="cartpole-1")
    try:
        async with app.run_test(size=(100, 30)) as pilot:
            await until(pilot, lambda: app.view is not None and app.view.columns)
            await pilot.press("ctrl+p")
            await pilot.pause()
            await pilot.press(*"attach to run pendulum")
            await pilot.pause(0.3)
            await pilot.press("enter")
            await until(pilot, lambda: app.view.run_id == "pendulum-2")
            assert big(app, "steps") == "6,144" and not app.view.following
    finally:
        first.close()
        second.close()


def test_a_late_monitor_draws_the_start_its_ring_has_lapped_from_progress_jsonl(tmp_path):
    """A monitor attached after a run's ring lapped its first records (the trainer's ring
    holds 8,192; here 512) drew curves from update 1,489 on, the learning phase gone: the
    older points come from progress.jsonl, as a monitor attached from the start has them."""
    import json

    from monitor_fixtures import values_at

    from operant.shared.runs import PROGRESS_FILE

    run = Run(tmp_path, history_capacity=512)
    updates = 2000
    with open(run.dir / PROGRESS_FILE, "w") as progress:
        for update in range(1, updates + 1):
            values = values_at(update)
            line = {"update": update, **{k: v for k, v in values.items() if k != "updates"}}
            line["phase_s"] = {"env": 0.5, "update": 0.25}
            progress.write(json.dumps(line) + "\n")
    run.publish(updates)
    source = ReaderSource(tmp_path, run.run_id)
    try:
        view = source.poll()
        steps = view.history["global_step"]
        assert steps == tuple(float(u * 1024) for u in range(1, updates + 1))
        expected = tuple(values_at(u)["episode_return_mean"] for u in range(1, updates + 1))
        assert view.history["episode_return_mean"] == pytest.approx(expected)
        run.publish(1)
        assert source.poll().history["global_step"][-1] == (updates + 1) * 1024.0
    finally:
        source.stop()
        run.close()


def test_following_an_empty_root_waits_for_its_first_run(tmp_path):
    """`operant monitor --latest --follow`, opened before the first run (the pane beside the
    one that starts it), exited 2 with "no runs yet": it waits, then shows the run."""
    source = ReaderSource(tmp_path, None, follow=True)
    try:
        view = source.poll()
        assert (view.status, view.following) == ("waiting", True)
        assert view.problem == f"no run under {tmp_path} yet; the first one started is shown"
        run = Run(tmp_path)
        run.publish(3)
        view = source.poll()
        assert (view.run_id, view.metrics["global_step"]) == (run.run_id, 3072)
        run.close()
    finally:
        source.stop()
    # The command gets past the root (to what a pipe lacks), where it said "no runs yet".
    empty = tmp_path / "empty"
    result = subprocess.run(
        [sys.executable, "-m", "operant.cli", "monitor", "--latest", "--follow"]
        + ["--runs-dir", str(empty)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2 and "the interactive view needs a terminal" in result.stderr


def test_a_run_whose_file_is_deleted_is_not_running_once_its_trainer_exits(tmp_path):
    """`rm metrics.bin` under a running trainer, which then exits: the monitor said
    `running (unreadable)` forever, heartbeat frozen; once the trainer is gone it says so."""
    import signal

    writer = Path(__file__).with_name("metrics_writer_proc.py")
    run_dir = tmp_path / "rmrun"
    run_dir.mkdir()
    proc = subprocess.Popen(
        [sys.executable, str(writer), "live", str(run_dir / "metrics.bin"), "0.1"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    source = ReaderSource(tmp_path, "rmrun")
    try:
        assert proc.stdout.readline().strip() == "ready"
        assert source.poll().status == "running"
        (run_dir / "metrics.bin").unlink()
        view = source.poll()
        assert view.status == "running" and "removed" in view.problem  # the trainer lives on
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        view = source.poll()
        assert view.status == "unknown"
        assert view.problem.endswith(f"its trainer (pid {proc.pid}) has exited")
    finally:
        source.stop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
