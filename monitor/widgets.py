"""The monitor's widgets, each thin: a reactive value, a render, CSS in monitor.tcss.

What the numbers and curves say is computed in operant.monitor.format; which words describe a
run's state is `describe_status` here, a pure function of a RunView.
"""

from __future__ import annotations

import math

from rich.align import Align
from rich.segment import Segment
from rich.text import Text
from textual.geometry import Size
from textual.reactive import reactive
from textual.renderables.digits import Digits as DigitsRenderable
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widget import Widget

from operant.monitor import format as fmt
from operant.monitor.source import STATUS_UNKNOWN, STATUS_WAITING, RunView
from operant.shared import record
from operant.shared.ranks import status_text
from operant.shared.record import PHASES, env_phase_of, phase_of

PHASE_COLORS = (
    "#4e9a06",
    "#3465a4",
    "#c4a000",
    "#75507b",
    "#cc0000",
    "#06989a",
    "#ad7fa8",
    "#e9b96e",
)
STUCK_STYLE = "bold #c4a000"
"""A running run that makes no update: a warning, as stalled."""
STATUS_STYLES = {
    "running": "bold #4e9a06",
    "finished": "bold #3465a4",
    "failed": "bold #cc0000",
    "crashed": "bold #cc0000",
    "stalled": "bold #c4a000",
    STATUS_WAITING: "bold #888888",
    STATUS_UNKNOWN: "bold #c4a000",
}


# How the banner says that some ranks of a distributed run are in trouble.
_RANK_TROUBLE = {
    "failed": "A rank FAILED",
    "crashed": "A rank CRASHED (gone without saying it finished)",
    "stalled": "A rank STALLED (no heartbeat: stopped or hung)",
}


def describe_status(view: RunView) -> tuple[str, str]:
    """(severity, sentence) for the banner: what state the run is in, in plain words, and
    what the values on screen are. Severity is '', 'information', 'warning' or 'error';
    '' means there is nothing to say beyond the status in the title."""
    if view.status == STATUS_WAITING:
        return "information", f"Waiting: {view.problem}."
    if view.problem:
        kept = " Showing the last values read." if view.columns else ""
        return "error", f"Cannot read the metrics file: {view.problem}.{kept} Retrying."
    ran = fmt.duration(view.uptime_s)
    if view.status == "finished":
        how = "stopped on request (SIGINT/SIGTERM)" if view.interrupted else "finished"
        return "information", f"Run {how} after {ran}. These are its final values."
    if view.status == "failed":
        reason = view.reason or "no reason given"
        return "error", f"Run FAILED after {ran}: {reason}. These are its last values."
    if view.status_ranks and view.status in _RANK_TROUBLE:
        who = "; ".join(
            f"rank {row.rank} (pid {row.pid} on {row.node or '?'})"
            + (f": {row.reason}" if row.reason else "")
            for row in view.ranks
            if row.rank in view.status_ranks
        )
        return "warning" if view.status == "stalled" else "error", (
            f"{_RANK_TROUBLE[view.status]}: {who}. The other ranks keep their values; the "
            "run's steps count every rank's."
        )
    if view.status == "crashed":
        return "error", (
            f"Trainer CRASHED: pid {view.pid} is gone without saying it "
            f"finished (last heartbeat {fmt.duration(view.heartbeat_age_s)} ago). "
            "These are its last values."
        )
    if view.status == "stalled":
        return "warning", (
            f"STALLED: no heartbeat for {fmt.duration(view.heartbeat_age_s)} "
            f"(expected every {fmt.short_time(view.heartbeat_interval_s)}); "
            "the trainer is stopped or hung."
        )
    advance = view.progress
    if advance is not None and advance.stuck:
        where = f" (py-spy dump --pid {view.pid} shows where it waits)" if view.pid else ""
        return "warning", (
            f"STUCK: {fmt.no_update_text(advance)}, though its heartbeat goes on: the trainer "
            f"lives but does not train. A hung env step?{where}"
        )
    if view.state == "initializing":
        return "information", "The trainer is starting up."
    warning = view.metrics.get(record.WARNING.name)
    if isinstance(warning, str) and warning:
        return "warning", f"Warning: {warning}."
    return "", ""


def title_text(view: RunView, paused: bool) -> Text:
    """The top line: run, env, status, uptime, and whether the screen is frozen."""
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(" operant ", style="bold reverse")
    if paused:
        # First, where a narrow terminal still shows it.
        text.append(" PAUSED (p resumes) ", style="bold reverse #c4a000")
    text.append(f" {view.run_id}", style="bold")
    if view.env_id:
        text.append(f"  {view.env_id}")
    status = status_text(view.status, view.status_ranks, view.unread_ranks)
    status += " (unreadable)" if view.problem and view.columns else ""
    text.append("  ● ", style=STATUS_STYLES.get(view.status, "bold"))
    text.append(status, style=STATUS_STYLES.get(view.status, "bold"))
    stuck = fmt.no_update_text(view.progress, detail=False) if view.progress else ""
    if stuck:
        text.append(f", {stuck}", style=STUCK_STYLE)
    if fmt.is_number(view.uptime_s):
        label = "up" if view.status in ("running", "stalled") else "ran"
        text.append(f"  {label} {fmt.duration(view.uptime_s)}")
    if view.following:
        text.append("  following latest", style="italic")
    return text


def process_text(view: RunView) -> Text:
    """The second line: the trainer process and the heartbeat."""
    text = Text(no_wrap=True, overflow="ellipsis")
    if view.world_size > 1:
        nodes = ", ".join(dict.fromkeys(row.node for row in view.ranks if row.node))
        text.append(f" {view.world_size} ranks" + (f" on {nodes}" if nodes else ""))
    elif view.pid:
        text.append(f" pid {view.pid}")
        if view.hostname:
            text.append(f"@{view.hostname}")
    process = view.process
    if process is not None:
        text.append(f"  CPU {fmt.percent(process.cpu_percent)}")
        text.append(f"  RSS {fmt.size(process.rss_bytes)}")
    if fmt.is_number(view.heartbeat_age_s):
        text.append(f"  heartbeat {fmt.short_time(view.heartbeat_age_s)} ago")
    updates = view.metrics.get("updates")
    if fmt.is_number(updates):
        text.append(f"  update {fmt.count(updates)}")
    return text


def rank_text(view: RunView) -> Text:
    """The per-rank table of a run trained by several processes (`--once`'s table), each
    rank's status in its colour; empty for a single process."""
    text = Text(no_wrap=True, overflow="ellipsis")
    if view.world_size <= 1:
        return text
    lines = fmt.rank_table(view.ranks)
    text.append(lines[0], style="bold")
    status_column = lines[0].index("STATUS")
    for row, line in zip(view.ranks, lines[1:]):
        text.append("\n")
        start = len(text)
        text.append(line)
        style = STATUS_STYLES.get(row.status)
        if style:
            text.stylize(style, start + status_column, start + status_column + len(row.status))
    for line in lines[1 + len(view.ranks) :]:
        text.append("\n" + line, style="italic")
    return text


class BigNumber(Widget):
    """One headline number in large digits, its name in the border: the full number where it
    fits, else its compact form (12.3k). Its size is set by CSS, so a new value only repaints
    (Textual's Digits asks for a layout pass whenever the width of its text changes)."""

    text: reactive[str] = reactive(fmt.MISSING)

    def __init__(self, label: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.border_title = label
        self._forms = (fmt.MISSING, fmt.MISSING)

    def show(self, full: str, short: str, note: str = "") -> None:
        self._forms = (full, short)
        self._fit()
        if note != self.border_subtitle:
            self.border_subtitle = note

    def _fit(self) -> None:
        full, short = self._forms
        width = self.content_size.width
        self.text = full if not width or DigitsRenderable.get_width(full) <= width else short

    def on_resize(self) -> None:
        self._fit()

    def render(self) -> Align:
        style = self.rich_style
        return Align(DigitsRenderable(self.text, style), "center", style)


class Curve(Widget):
    """A history curve: its name, last value and range on the first line, the curve below."""

    data: reactive[tuple[float, ...]] = reactive((), layout=False)

    def __init__(self, title: str, *, color: str, id: str | None = None) -> None:
        super().__init__(id=id)
        self.title = title
        self.color = color

    def render(self) -> Text:
        width, height = self.size.width, self.size.height
        values = self.data
        numbers = fmt.finite(values)
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(self.title, style=f"bold {self.color}")
        if numbers:
            text.append(f" {fmt.real(numbers[-1])}", style="bold")
            if height > 1:
                text.append(
                    f"  {fmt.real(min(numbers), 3)}…{fmt.real(max(numbers), 3)}", style="dim"
                )
        else:
            text.append("  no data yet", style="dim")
        if height == 1:
            # No room for a row of its own: the curve follows the title on its line.
            room = width - text.cell_len - 2
            if room >= 8:
                text.append("  ")
                text.append(fmt.sparkline(values, room)[0], style=self.color)
            return text
        for row in fmt.sparkline(values, width, height - 1):
            text.append("\n")
            text.append(row, style=self.color)
        return text


def phase_parts(metrics: dict[str, int | float | str]) -> tuple[tuple[str, float], ...]:
    """(phase, seconds) from every phase metric (`phase_<name>_s`): the loop's phases
    (operant.shared.record.PHASES) in loop order, then any others a run publishes."""
    found = {
        phase: value
        for name, value in metrics.items()
        if (phase := phase_of(name)) is not None and fmt.is_number(value)
    }
    ordered = [name for name in PHASES if name in found]
    ordered += sorted(name for name in found if name not in PHASES)
    return tuple((name, float(found[name])) for name in ordered)


def env_phase_parts(metrics: dict[str, int | float | str]) -> tuple[tuple[str, float], ...]:
    """(phase, seconds) of the env's own step phases (`env_phase_<name>_s`, published by a
    profiling env), in the schema's order: the sub-phases of env."""
    return tuple(
        (phase, float(value))
        for name, value in metrics.items()
        if (phase := env_phase_of(name)) is not None and fmt.is_number(value)
    )


class PhaseBar(Widget):
    """Where one update's time goes: a stacked bar, then a legend with shares and times; for
    a profiling env a third line splits env into the env's own step phases."""

    phases: reactive[tuple[tuple[str, float], ...]] = reactive(())
    env_phases: reactive[tuple[tuple[str, float], ...]] = reactive(())

    def watch_env_phases(self, parts: tuple[tuple[str, float], ...]) -> None:
        self.styles.height = 3 if parts else 2

    def render(self) -> Text:
        width = self.size.width
        parts = fmt.shares(self.phases)
        text = Text(no_wrap=True, overflow="ellipsis")
        if not parts or sum(seconds for _, seconds, _ in parts) <= 0:
            text.append("update phases: not timed yet", style="dim")
            return text
        cells = fmt.allocate([share for _, _, share in parts], width)
        for index, ((_name, _seconds, _share), count) in enumerate(zip(parts, cells)):
            text.append("█" * count, style=PHASE_COLORS[index % len(PHASE_COLORS)])
        text.append("\n")
        _legend(text, "update", parts, width)
        env_parts = fmt.shares(self.env_phases)
        if env_parts and sum(seconds for _, seconds, _ in env_parts) > 0:
            text.append("\n")
            _legend(text, "env", env_parts, width)
        return text


def _legend(text: Text, title: str, parts: list[tuple[str, float, float]], width: int) -> None:
    """`title TOTAL: ■name share% ...` (times too where the terminal is wide enough), each
    part in its bar colour."""
    total = sum(seconds for _, seconds, _ in parts)
    text.append(f"{title} {fmt.short_time(total)}:", style="bold")
    for index, (name, seconds, share) in enumerate(parts):
        text.append(" ■", style=PHASE_COLORS[index % len(PHASE_COLORS)])
        text.append(f"{name} {share * 100:.0f}%")
        if width >= 120:
            text.append(f" {fmt.short_time(seconds)}", style="dim")


def table_rows(view: RunView) -> tuple[tuple[str, str, str], ...]:
    """(metric, value, unit) for every metric in the run's schema, in schema order, values
    formatted by kind and unit (fmt.metric), each unit said once: the metrics table's
    content."""
    return tuple(
        (info.name, *fmt.metric(view.metrics.get(info.name, math.nan), info.unit, info.kind))
        for info in view.columns
    )


class MetricsTable(ScrollView, can_focus=True):
    """Every metric in the run's schema, known or not, with its value and unit.

    A line-API widget: a new view re-renders only the visible lines, from plain strings, so
    a screenful of values that change every second stays cheap to draw.
    """

    COMPONENT_CLASSES = {"metrics-table--header", "metrics-table--stripe"}
    HEADER = ("metric", "value", "unit")
    MAX_VALUE_WIDTH = 16

    rows: reactive[tuple[tuple[str, str, str], ...]] = reactive(())

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._widths = [len(title) for title in self.HEADER]

    def show(self, view: RunView) -> None:
        self.rows = table_rows(view)

    def watch_rows(self, rows: tuple[tuple[str, str, str], ...]) -> None:
        self._widths = [
            min(
                max(len(row[column]) for row in (self.HEADER, *rows)),
                self.MAX_VALUE_WIDTH if column == 1 else 1000,
            )
            for column in range(3)
        ]
        # The header stays on line 0; rows scroll beneath it.
        self.virtual_size = Size(sum(self._widths) + 3, len(rows) + 1)
        self.refresh()

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.size.width
        rows = self.rows
        if y == 0:
            row, style = self.HEADER, self.get_component_rich_style("metrics-table--header")
        else:
            index = scroll_y + y - 1
            if index >= len(rows):
                return Strip.blank(width, self.rich_style)
            row = rows[index]
            style = (
                self.get_component_rich_style("metrics-table--stripe")
                if index % 2
                else self.rich_style
            )
        name_width, value_width, unit_width = self._widths
        name, value, unit = row
        if len(value) > value_width:
            value = value[: value_width - 1] + "…"
        line = f" {name:<{name_width}} {value:>{value_width}} {unit:<{unit_width}}"
        strip = Strip([Segment(line, style)])
        return strip.crop_extend(scroll_x, scroll_x + width, style)
