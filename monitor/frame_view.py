"""The monitor's frame view: a pixel run's latest frame (metrics format 1.2's optional region,
operant.shared.frame) in colour half blocks, beside the metrics table; hidden for runs that
publish no frame. Its own module: the one widget that draws an image rather than numbers."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.geometry import Size
from textual.reactive import reactive
from textual.widget import Widget

from operant.monitor import format as fmt
from operant.shared import frame as frames
from operant.shared.reader import Frame


def frame_text(frame: Frame, legend_width: int = 0) -> Text:
    """The frame in half blocks: each grid square one column wide and half a row tall (a
    terminal cell is about twice as tall as wide, so a square stays square and a 10 x 10
    MinAtar frame takes 10 x 5 cells), two squares per cell: `▀` in the upper square's
    colour on the lower square's. Then, where `legend_width` > 0, one line per channel, `■`
    in its colour and its name cut to fit."""
    grid = frames.cells(frame.data, frame.shape)
    text = Text(no_wrap=True, overflow="crop")
    styles: dict[tuple[str, str], Style] = {}
    for index, row in enumerate(frames.half_block_rows(grid, frame.colors)):
        if index:
            text.append("\n")
        for colors in row:
            style = styles.get(colors)
            if style is None:
                style = styles[colors] = Style(color=colors[0], bgcolor=colors[1])
            text.append(frames.UPPER_HALF_BLOCK, style=style)
    if legend_width > 0:
        for channel, (name, color) in enumerate(zip(frame.channels, frame.colors)):
            text.append("\n■", style=color)
            text.append(f" {(name or f'channel {channel}')[: legend_width - 2]}")
    return text


def _frame_subtitle(frame: Frame) -> str:
    return f"update {fmt.count(frame.updates)}"


class FrameView(Widget):
    """A pixel run's latest frame (env 0), drawn by `frame_text`, the update it shows in
    the border; hidden (no space taken) while the run has no frame."""

    LEGEND_WIDTH = 16
    """At most this many columns for the legend: `■ ` and a channel's name, cut to fit."""

    frame: reactive[Frame | None] = reactive(None, layout=True)

    def watch_frame(self, frame: Frame | None) -> None:
        self.display = frame is not None
        if frame is not None:
            self.border_title = f"env {frame.env}"
            self.border_subtitle = _frame_subtitle(frame)

    def get_content_width(self, container: Size, viewport: Size) -> int:
        frame = self.frame
        if frame is None:
            return 0
        names = [len(name or f"channel {index}") for index, name in enumerate(frame.channels)]
        legend = min(self.LEGEND_WIDTH, 2 + max(names, default=0))
        # The border's subtitle (`update N`) fits too: it says how old the frame is.
        return max(frame.shape[2], legend, len(_frame_subtitle(frame)) + 2)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        frame = self.frame
        if frame is None:
            return 0
        return (frame.shape[1] + 1) // 2 + frame.shape[0]

    def render(self) -> Text:
        if self.frame is None:
            return Text()
        return frame_text(self.frame, self.LEGEND_WIDTH)
