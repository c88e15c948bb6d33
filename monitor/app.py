"""The interactive monitor: a Textual app that draws the RunViews its data source posts.

The app owns no reading: it is handed a `SnapshotSource` (operant.monitor.source) and only
draws what arrives, so a test passes a fake source and a real run passes a ReaderSource. Keys:
q detaches, r picks another run, p pauses the screen, ? shows help; the command palette
(ctrl+p) can attach to any run by name.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import msgspec
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Footer, Static

from operant.monitor import format as fmt
from operant.monitor.frame_view import FrameView
from operant.monitor.listing import RunRow, listed_sps
from operant.monitor.source import (
    ReaderSource,
    RunUpdate,
    RunView,
    SnapshotSource,
    SourceFailed,
)
from operant.monitor.widgets import (
    BigNumber,
    Curve,
    MetricsTable,
    PhaseBar,
    describe_status,
    env_phase_parts,
    phase_parts,
    process_text,
    rank_text,
    title_text,
)
from operant.shared.reader import shown_sps, shown_status
from operant.shared.record import label
from operant.shared.runs import command_hint, has_checkpoint, resume_command
from operant.shared.sweeps import read_summary

# History fields drawn as curves when the run records them, in this order, with their titles
# (operant.shared.record's labels).
CURVES = tuple(
    (name, label(name), color)
    for name, color in (
        ("episode_return_mean", "#8ae234"),
        ("sps", "#729fcf"),
        ("policy_loss", "#ef2929"),
        ("value_loss", "#fcaf3e"),
        ("entropy", "#ad7fa8"),
        ("approx_kl", "#34e2e2"),
    )
)
# Fields never worth a curve of their own (they only grow).
_NOT_CURVES = {"global_step", "episodes", "updates", "elapsed_s"}
MAX_CURVES = len(CURVES)
# How often the run picker lists the runs again while it is open, seconds.
PICKER_REFRESH_S = 1.0
# How much the monitor process lowers its own scheduling priority (os.nice) when it starts.
NICENESS = 10

HELP = """\
[b]operant monitor[/b] reads a run's metrics file, read-only: quitting or
killing the monitor never touches the trainer.

[b]Keys[/b]
  [b]q[/b]       detach: the run keeps training (operant monitor --latest
          attaches again); ctrl+c and ctrl+q detach too
  [b]r[/b]       pick another run to watch (the list of operant runs)
  [b]p[/b]       pause the screen; p again shows the newest values
  [b]?[/b]       this help
  [b]ctrl+p[/b]  command palette: type a run id to attach to it
  [b]esc[/b]     close this window

[b]Status[/b]
  [b]running[/b]   the trainer's heartbeat is fresh
  [b]finished[/b]  the run ended (budget spent or stopped on request)
  [b]failed[/b]    the trainer caught an error: reason and last values
  [b]crashed[/b]   the trainer is gone without a final state (killed, OOM)
  [b]stalled[/b]   the trainer is there but its heartbeat stopped
  [b]waiting[/b]   the run has no metrics file yet
When the file cannot be read (replaced, removed, corrupt) the last
values stay on screen with the reason, and the monitor keeps trying.
"""


def choose_curves(fields: list[str]) -> list[tuple[str, str, str]]:
    """(field, title, color) of the curves to draw for a run that records `fields`: the
    well-known ones it has, else its first other fields, so any run gets curves."""
    known = [curve for curve in CURVES if curve[0] in fields]
    if known:
        return known
    colors = [color for _, _, color in CURVES]
    others = [name for name in fields if name not in _NOT_CURVES][:MAX_CURVES]
    return [(name, label(name), colors[i % len(colors)]) for i, name in enumerate(others)]


class DaemonThreads(ThreadPoolExecutor):
    """The app's event loop's default executor, where Textual runs thread workers (the
    source's reader) and asyncio.to_thread (the picker's listing): each call in a daemon
    thread of its own, which nothing waits for. asyncio's own executor is joined when its
    loop closes (asyncio.run, inside App.run) and at exit, so a read stuck on a slow disk
    held `q` until it returned; here the read keeps its thread and the monitor leaves."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()

        def call() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                result = fn(*args, **kwargs)
            except BaseException as error:  # handed to whoever awaits the call, as the pool does
                future.set_exception(error)
            else:
                future.set_result(result)

        threading.Thread(target=call, name="operant-monitor-io", daemon=True).start()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Nothing to wait for or to cancel: each call's thread ends with it, or with the
        process."""


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help"):
            yield Static(HELP, id="help-text")


class RunPicker(ModalScreen[str | None]):
    """The runs under the runs root, as `operant runs` lists them, listed again every
    PICKER_REFRESH_S while open (a live sweep's leaderboard and its running trial's steps
    move as they do); Enter attaches."""

    BINDINGS = [Binding("escape,r", "dismiss(None)", "Close")]

    def __init__(
        self, rows: list[RunRow], current: str, relist: Callable[[], list[RunRow]] | None = None
    ) -> None:
        """`relist`: lists the runs again (off the UI thread: it reads every run's file)."""
        super().__init__()
        self.rows = rows
        self.current = current
        self.relist = relist

    def compose(self) -> ComposeResult:
        with Vertical(id="picker"):
            yield Static(id="picker-title")
            yield DataTable(id="runs", cursor_type="row", zebra_stripes=True)
            yield Static(id="sweeps")

    def on_mount(self) -> None:
        table = self.query_one("#runs", DataTable)
        table.add_columns("run id", "env", "status", "steps", "steps/s", "age")
        self._fill(self.current)
        table.focus()
        if self.relist is not None:
            self.set_interval(PICKER_REFRESH_S, self._refresh_rows)

    async def _refresh_rows(self) -> None:
        assert self.relist is not None
        rows = await asyncio.to_thread(self.relist)
        if not self.is_attached:  # closed while listing
            return
        table = self.query_one("#runs", DataTable)
        # the run under the cursor stays under it (its row may have moved)
        chosen = self.current
        if table.row_count:
            chosen = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value or chosen
        self.rows = rows
        self._fill(chosen)

    def _fill(self, chosen: str) -> None:
        """The table from `self.rows` (newest first), the cursor on run `chosen`."""
        table = self.query_one("#runs", DataTable)
        table.clear()
        for row in reversed(self.rows):
            table.add_row(
                row.run_id,
                row.env_id or "-",
                fmt.listed_status(row),
                fmt.count(row.global_step),
                fmt.compact(listed_sps(row)),
                fmt.duration(row.age_s),
                key=row.run_id,
            )
        self.query_one("#picker-title", Static).update(
            "Attach to a run: ↑↓ choose, enter attaches, esc closes"
            if self.rows
            else "No runs under the runs root yet (esc closes)"
        )
        ids = [row.run_id for row in reversed(self.rows)]
        if chosen in ids:
            table.move_cursor(row=ids.index(chosen))
        sweeps = self.query_one("#sweeps", Static)
        sweeps.display = any(row.sweep for row in self.rows)
        sweeps.update(sweep_lines(self.rows))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.dismiss(event.row_key.value)


def sweep_lines(rows: list[RunRow]) -> str:
    """The leaderboard line of each sweep whose trials are among `rows`, as `operant runs`
    heads them (read from the sweep's summary file: operant.shared.sweeps)."""
    # row.path is the trial's metrics file (or folder): its sweep directory is two levels up
    directories = dict.fromkeys(Path(row.path).parent.parent for row in rows if row.sweep)
    return "\n".join(
        fmt.sweep_heading(directory.name, read_summary(directory), rows)
        for directory in directories
    )


class RunCommands(Provider):
    """Command palette entries: one `Attach to run ...` per run under the runs root."""

    async def startup(self) -> None:
        app = self.app
        self.rows = app.source.runs() if isinstance(app, MonitorApp) else []

    def _commands(self):
        app = self.app
        for row in reversed(self.rows):
            yield (
                f"Attach to run {row.run_id}",
                partial(app.attach, row.run_id),
                f"{row.env_id or '-'}, {shown_status(row.status, row.interrupted)}, "
                f"{fmt.count(row.global_step)} steps",
            )

    async def discover(self) -> Hits:
        for text, command, help_text in self._commands():
            yield DiscoveryHit(text, command, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for text, command, help_text in self._commands():
            score = matcher.match(text)
            if score > 0:
                yield Hit(score, matcher.highlight(text), command, help=help_text)


class RunScreen(Screen):
    """The run: title, process line, banner, big numbers, curves, metrics table, a pixel
    run's frame, phases.
    It starts the source once its widgets exist, so no view arrives before them."""

    def compose(self) -> ComposeResult:
        yield Static(id="title")
        yield Static(id="process")
        yield Static(id="banner")
        with Horizontal(id="numbers"):
            yield BigNumber(label("global_step"), id="steps")
            yield BigNumber(label("sps"), id="sps")
            yield BigNumber(label("episodes"), id="episodes")
            yield BigNumber(label("episode_return_mean"), id="return")
        with Horizontal(id="body"):
            # The trainer's curves from the start: no mounting when the first view arrives.
            with Vertical(id="curves"):
                for name, title, color in CURVES:
                    yield Curve(title, color=color, id=f"curve-{name}")
            yield MetricsTable(id="table")
            # A pixel run's latest frame (hidden for other runs).
            yield FrameView(id="frame")
        # A run of several processes: a row per rank (hidden for one process).
        yield Static(id="ranks")
        yield PhaseBar(id="phases")
        yield Footer()

    def on_mount(self) -> None:
        app = self.app
        if isinstance(app, MonitorApp):
            app.source.start(app)
            app.detach_on_signals()

    def on_unmount(self) -> None:
        app = self.app
        if isinstance(app, MonitorApp):
            app.source.stop()


class MonitorApp(App[str | None]):
    """Draws one run at a time; `exit()` returns the run id watched last."""

    CSS_PATH = "monitor.tcss"
    TITLE = "operant monitor"
    ENABLE_COMMAND_PALETTE = True
    COMMANDS = App.COMMANDS | {RunCommands}
    BINDINGS = [
        Binding("q", "detach", "Detach"),
        Binding("r", "pick_run", "Runs"),
        Binding("p", "toggle_pause", "Pause"),
        Binding("question_mark", "help", "Help", key_display="?"),
        # Ctrl-C detaches as q does (Textual's own answer was a notice, "Press ctrl+q to
        # quit"); the trainer never sees it
        Binding("ctrl+c", "detach", "Detach", show=False, priority=True),
    ]

    def __init__(self, source: SnapshotSource) -> None:
        super().__init__()
        self.source = source
        self.view: RunView | None = None
        """The view on screen."""
        self.paused = False
        self.pending: RunView | None = None
        """The newest view that arrived while paused."""
        self._curve_fields: list[str] | None = None
        self._curve_names = [name for name, _, _ in CURVES]
        """The curves on screen: the trainer's until a run records other fields."""
        self._banner: tuple[str, str] | None = None
        self.main = RunScreen()

    def get_default_screen(self) -> RunScreen:
        return self.main

    def on_load(self) -> None:
        # Before any worker starts: the source's reader runs in this executor's threads.
        asyncio.get_running_loop().set_default_executor(DaemonThreads())

    def get_system_commands(self, screen: Screen):
        yield from super().get_system_commands(screen)
        yield SystemCommand(
            "Attach to another run", "Pick a run to watch (same as r)", self.action_pick_run
        )
        yield SystemCommand(
            "Pause or resume", "Freeze the screen (same as p)", self.action_toggle_pause
        )

    # --- data ------------------------------------------------------------------------------

    def on_run_update(self, message: RunUpdate) -> None:
        if not self.is_running:
            return  # shutting down: views still queued have no widgets left to draw on
        view = message.view
        if self.paused:
            if view.notice:  # news about the run is not a value: say it even while paused
                self.notify(view.notice, title="operant monitor")
                view = msgspec.structs.replace(view, notice="")
            self.pending = view
            return
        self.show(view)

    def on_source_failed(self, message: SourceFailed) -> None:
        self.exit(
            return_code=1,
            message=f"operant monitor: the data source stopped on a bug:\n{message.details}",
        )

    def show(self, view: RunView) -> None:
        # One repaint for all the widgets a view touches.
        with self.batch_update():
            self._show(view)

    def _show(self, view: RunView) -> None:
        self.view = view
        if view.notice:
            self.notify(view.notice, title="operant monitor")
        self._show_header(view)
        metrics = view.metrics
        steps = metrics.get("global_step")
        # The trainer's own steps/s over its last update (a gauge), never re-derived here
        # from step deltas between two looks, which would mix in the monitor's timing.
        sps = shown_sps(metrics, view.status)
        total = metrics.get("total_steps")
        self.main.query_one("#steps", BigNumber).show(
            fmt.count(steps),
            fmt.compact(steps),
            f"of {fmt.compact(total)} ({fmt.percent(100 * steps / total)})"
            if fmt.is_number(steps) and fmt.is_number(total) and total > 0
            else "",
        )
        self.main.query_one("#sps", BigNumber).show(
            fmt.count(sps), fmt.compact(sps), "" if sps is metrics.get("sps") else "run's mean"
        )
        length = metrics.get("episode_length_mean")
        self.main.query_one("#episodes", BigNumber).show(
            fmt.count(metrics.get("episodes")),
            fmt.compact(metrics.get("episodes")),
            f"length {fmt.real(length, 3)}" if fmt.is_number(length) else "",
        )
        low, high = metrics.get("episode_return_min"), metrics.get("episode_return_max")
        mean = metrics.get("episode_return_mean")
        self.main.query_one("#return", BigNumber).show(
            fmt.real(mean, 4),
            fmt.compact(mean),
            f"{fmt.real(low, 3)}…{fmt.real(high, 3)}"
            if fmt.is_number(low) and fmt.is_number(high)
            else "",
        )
        self._show_curves(view)
        self.main.query_one("#table", MetricsTable).show(view)
        self.main.query_one("#frame", FrameView).frame = view.frame
        ranks = self.main.query_one("#ranks", Static)
        ranks.set_class(view.world_size > 1, "distributed")
        if view.world_size > 1:
            ranks.update(rank_text(view))
        bar = self.main.query_one("#phases", PhaseBar)
        bar.phases, bar.env_phases = phase_parts(metrics), env_phase_parts(metrics)

    def _show_header(self, view: RunView) -> None:
        # One-line widgets of a fixed height: no layout pass for new text.
        self.main.query_one("#title", Static).update(title_text(view, self.paused), layout=False)
        self.main.query_one("#process", Static).update(process_text(view), layout=False)
        banner = describe_status(view)
        if banner != self._banner:
            self._banner = banner
            severity, sentence = banner
            widget = self.main.query_one("#banner", Static)
            widget.update(sentence)
            widget.set_classes(severity)
        self.sub_title = f"{view.run_id} {view.status}"

    def _show_curves(self, view: RunView) -> None:
        fields = list(view.history)
        if fields and fields != self._curve_fields:
            self._curve_fields = fields
            wanted = choose_curves(fields)
            if [name for name, _, _ in wanted] != self._curve_names:
                self._curve_names = [name for name, _, _ in wanted]
                container = self.main.query_one("#curves", Vertical)
                container.remove_children()
                container.mount_all(
                    Curve(title, color=color, id=f"curve-{name}") for name, title, color in wanted
                )
                # Mounting completes after this handler: fill the curves once they exist,
                # with whatever view is on screen by then.
                self.call_after_refresh(self._fill_curves)
                return
        self._fill_curves()

    def _fill_curves(self) -> None:
        history = self.view.history if self.view is not None else {}
        for curve in self.main.query(Curve):
            name = (curve.id or "")[len("curve-") :]
            curve.data = history.get(name, ())

    # --- actions ---------------------------------------------------------------------------

    def action_detach(self) -> None:
        self.exit(self.view.run_id if self.view is not None else None)

    async def action_quit(self) -> None:
        """ctrl+q, Textual's own quit: a detach like q's, with its parting line."""
        self.action_detach()

    def detach_on_signals(self) -> None:
        """SIGTERM and SIGHUP (a kill, a timeout, a closed ssh session) detach as q does, so
        Textual restores the terminal (alternate screen, mouse reporting, cursor) on the way
        out: killed outright it left them as they were, and the shell unusable."""
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(signum, self.action_detach)

    def action_toggle_pause(self) -> None:
        self.paused = not self.paused
        if not self.paused and self.pending is not None:
            view, self.pending = self.pending, None
            self.show(view)
        elif self.view is not None:
            self._show_header(self.view)

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_pick_run(self) -> None:
        current = self.view.run_id if self.view is not None else ""
        source = self.source
        self.push_screen(RunPicker(source.runs(), current, source.runs), self._picked)

    def _picked(self, run_id: str | None) -> None:
        if run_id and (self.view is None or run_id != self.view.run_id):
            self.attach(run_id)

    def attach(self, run_id: str) -> None:
        """Watch another run from the next view on. A paused screen resumes: the user asked to
        see that run, and a frozen screen would go on showing the run just left."""
        self.notify(f"attaching to {run_id}", title="operant monitor")
        if self.paused:
            self.paused, self.pending = False, None
            if self.view is not None:
                self._show_header(self.view)
        self.source.attach(run_id)


def run_app(
    root: Path,
    run: str | None,
    *,
    follow: bool = False,
    refresh_s: float = 1.0,
    stuck_after_s: float | None = None,
) -> int:
    """Watch run `run` (None: whichever run `latest` names, switching when `follow`) until the
    user detaches; the exit status of `operant monitor`. `stuck_after_s`: when a running run
    is stuck (operant.shared.progress)."""
    # Below the trainer's priority: on a machine whose cores training keeps busy, the
    # scheduler gives way to the trainer whenever the two want a core at once.
    os.nice(NICENESS)
    app = MonitorApp(
        ReaderSource(root, run, follow=follow, interval_s=refresh_s, stuck_after_s=stuck_after_s)
    )
    watched = app.run()
    if app.return_code:
        return app.return_code
    if watched:
        try:
            print(detach_message(watched, app.view, root), flush=True)
        except OSError:
            pass  # the terminal went with the ssh session (SIGHUP): nobody to tell
    return 0


def detach_message(run_id: str, view: RunView | None, root: Path) -> str:
    """What `q` leaves on the terminal: the run's state in words, and the command (pasteable
    as printed) that does the next thing a user wants with a run in that state."""
    reattach = command_hint("operant monitor", run_id, root=root)
    if (
        view is None
        or view.run_id != run_id
        or view.status not in ("running", "stalled", "finished", "failed", "crashed")
    ):
        # never read (a file being created, corrupt, or none): nothing to say of training
        return f"detached from {run_id}. Reattach: {reattach}"
    status = view.status
    if said := trial_detach(run_id, view, root):
        return said
    # a run of K ranks resumes with K ranks (its checkpoints hold each rank's state)
    ranks = view.world_size
    nodes = len({row.node for row in view.ranks}) if ranks > 1 else 1
    # without a checkpoint, `--resume RUN` is refused: start it again in its directory
    restart = not has_checkpoint(root / run_id)
    resume = resume_command(
        run_id, root, ranks_per_node=ranks // max(1, nodes), nodes=nodes, auto=restart
    )
    if status == "finished" and view.interrupted:
        return (
            f"detached from {run_id}, which was stopped before the end of its budget. "
            f"Continue it: {resume}"
        )
    if status == "finished":
        return (
            f"detached from {run_id}, which has finished. Evaluate it: "
            f"{command_hint('operant eval', run_id, root=root)}"
        )
    if status in ("failed", "crashed"):
        why = f": {view.reason}" if view.reason else ""
        how = (
            "It wrote no checkpoint; start it again with its own config"
            if restart
            else "Continue from its last checkpoint"
        )
        return f"detached from {run_id}, whose trainer {status}{why}. {how}: {resume}"
    return f"detached from {run_id}; training goes on. Reattach: {reattach}"


def trial_detach(run_id: str, view: RunView, root: Path) -> str | None:
    """What `q` says of a sweep's trial that ended early (pruned, stopped with its sweep,
    failed): what became of the trial, as its sweep's summary says; its sweep, not a resume by
    hand, continues it. None for a run that is no sweep's trial, or did not end early."""
    stopped = view.status == "finished" and view.interrupted
    if not (stopped or view.status in ("failed", "crashed")):
        return None
    summary = read_summary(Path(view.run_dir).parent)
    trials = [row for row in summary.trials if run_id in row.run_ids] if summary else []
    if summary is None or not trials:
        return None
    trial = trials[-1]  # a trial continued by a later one shares its runs
    state = f"{trial.state}: {trial.reason}" if trial.reason else trial.state
    then = (
        "run the same operant sweep command to continue it"
        if trial.state == "interrupted"
        else f"see {command_hint('operant sweep show', summary.name, root=root)}"
    )
    return f"detached from {run_id}, trial {trial.number} of sweep {summary.name} ({state}); {then}"
