"""SVG snapshots of the monitor at fixed terminal sizes, with the clock frozen: every view
comes from the fake source at monitor_fixtures.FROZEN_NOW, so uptime and heartbeat ages are
the same on every run. Update them with `pytest --snapshot-update` and look at the diff."""

from pathlib import Path

from monitor_fixtures import FakeSource, breakout_frame, make_view

from operant.monitor.app import MonitorApp
from operant.monitor.widgets import Curve


async def drawn(pilot):
    """Wait until the first view is on screen with its curves filled."""
    app = pilot.app
    for _ in range(200):
        curves = list(app.main.query(Curve)) if app.view is not None else []
        if curves and all(curve.data for curve in curves):
            break
        await pilot.pause(0.02)
    await pilot.pause()


def test_running_80x24(snap_compare):
    assert snap_compare(
        MonitorApp(FakeSource(make_view())), terminal_size=(80, 24), run_before=drawn
    )


def test_running_160x48(snap_compare):
    assert snap_compare(
        MonitorApp(FakeSource(make_view())), terminal_size=(160, 48), run_before=drawn
    )


def test_crashed_80x24(snap_compare):
    view = make_view(status="crashed", heartbeat_age_s=75.0, process=None)
    assert snap_compare(MonitorApp(FakeSource(view)), terminal_size=(80, 24), run_before=drawn)


def test_failed_160x48(snap_compare):
    view = make_view(status="failed", reason="non-finite loss at update 120", process=None)
    assert snap_compare(MonitorApp(FakeSource(view)), terminal_size=(160, 48), run_before=drawn)


def test_pixel_run_120x36(snap_compare):
    """A MinAtar run: its latest frame beside the metrics table, in half blocks."""
    view = make_view(env_id="MinAtar-Breakout-v1", frame=breakout_frame())
    assert snap_compare(MonitorApp(FakeSource(view)), terminal_size=(120, 36), run_before=drawn)


def test_run_picker_80x24(snap_compare):
    async def picker(pilot):
        await drawn(pilot)
        await pilot.press("r")
        await pilot.pause()

    assert snap_compare(
        MonitorApp(FakeSource(make_view())), terminal_size=(80, 24), run_before=picker
    )


def test_the_readme_image_is_the_current_snapshot():
    """docs/monitor.svg is the fake run's 160x48 screen, kept equal to its snapshot (README and
    docs/monitor.md show a real run's, docs/monitor-run.svg); refresh it when that changes:
    cp tests/__snapshots__/test_monitor_snapshots/test_running_160x48.svg docs/monitor.svg"""
    here = Path(__file__).parent
    snapshot = here / "__snapshots__" / "test_monitor_snapshots" / "test_running_160x48.svg"
    assert (here.parent / "docs" / "monitor.svg").read_text() == snapshot.read_text()
