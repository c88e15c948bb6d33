"""A pixel run's frame in the user's words: which channel each grid square shows, in which
colour, as text or as half-block cells.

The metrics file's frame region (format 1.2, operant.shared.metrics_layout) holds one env's
latest observation, (C, H, W) bytes, channels first, one channel per object kind (MinAtar's
convention). This module turns such bytes into what readers draw, the way MinAtar's own
display does (`minatar.Environment.display_state`): a square shows the highest-numbered
channel that is set there, in that channel's colour, and black where none is; the colours are
MinAtar's, its "cubehelix" palette with one colour per channel (Green 2011, below).

Pure Python, no numpy: `operant monitor --once/--json` and the Textual monitor use it, and the
trainer uses `frame_palette` to write the colours into the file.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

BACKGROUND = "#000000"
"""A square where no channel is set (MinAtar draws it black)."""
EMPTY = -1
"""`cells()`'s value for a square where no channel is set."""
KEYS = "0123456789abcdefghijklmnopqrstuvwxyz"
"""The character `--once` prints for channel i (then `#` for channels past these)."""
EMPTY_KEY = "."
UPPER_HALF_BLOCK = "\u2580"
"""▀: its foreground paints the upper half of a terminal cell, its background the lower."""

# D. A. Green, "A colour scheme for the display of astronomical intensity images", Bull.
# Astr. Soc. India 39 (2011) 289: a helix through the RGB cube along the grey diagonal. The
# parameters of matplotlib's "cubehelix" map (start 0.5, rotations -1.5, hue 1, gamma 1),
# which is what seaborn's color_palette("cubehelix", n) samples and MinAtar draws with.
_START, _ROTATIONS, _HUE, _GAMMA = 0.5, -1.5, 1.0, 1.0
# The paper's coefficients of cos(phi) and sin(phi) per colour component.
_COEFFICIENTS = ((-0.14861, 1.78277), (-0.29227, -0.90649), (1.97294, 0.0))
# matplotlib samples the map into a table of this many entries and looks colours up in it.
_TABLE = 256


def _cubehelix(fraction: float) -> tuple[float, float, float]:
    """The helix's colour at `fraction` in [0, 1], each component clipped to [0, 1]."""
    lightness = fraction**_GAMMA
    amplitude = _HUE * lightness * (1 - lightness) / 2
    angle = 2 * math.pi * (_START / 3 + _ROTATIONS * fraction)
    red, green, blue = (
        min(1.0, max(0.0, lightness + amplitude * (a * math.cos(angle) + b * math.sin(angle))))
        for a, b in _COEFFICIENTS
    )
    return red, green, blue


def frame_palette(channels: int) -> tuple[str, ...]:
    """MinAtar's colour of each of `channels` channels, `#rrggbb`: the cubehelix map at
    `channels` evenly spaced points strictly inside (0, 1), as seaborn samples it (through
    matplotlib's 256-entry table), so a frame looks as MinAtar's own display draws it."""
    colors = []
    for index in range(channels):
        fraction = (index + 1) / (channels + 1)
        entry = min(_TABLE - 1, int(fraction * _TABLE))
        red, green, blue = _cubehelix(entry / (_TABLE - 1))
        colors.append(f"#{round(red * 255):02x}{round(green * 255):02x}{round(blue * 255):02x}")
    return tuple(colors)


def cells(data: bytes, shape: Sequence[int]) -> list[list[int]]:
    """For each of the H rows, for each of the W squares: the highest-numbered channel that
    is set (non-zero) there, or EMPTY. `data` is (C, H, W) bytes in C order."""
    channels, height, width = shape
    plane = height * width
    grid = [EMPTY] * plane
    for channel in range(channels):
        offset = channel * plane
        for square in range(plane):
            if data[offset + square]:
                grid[square] = channel
    return [grid[row * width : (row + 1) * width] for row in range(height)]


def key(channel: int) -> str:
    """The character that stands for `channel` in text (`.` for EMPTY)."""
    if channel == EMPTY:
        return EMPTY_KEY
    return KEYS[channel] if channel < len(KEYS) else "#"


def text_rows(grid: list[list[int]]) -> list[str]:
    """The grid as text, one character per square (`key`): what `--once` prints."""
    return ["".join(key(channel) for channel in row) for row in grid]


def half_block_rows(
    grid: list[list[int]], colors: Sequence[str], background: str = BACKGROUND
) -> list[list[tuple[str, str]]]:
    """The grid as terminal cells of `▀`: one cell per square across, two squares (rows
    2k and 2k + 1) per cell down. Each cell is (upper colour, lower colour): the upper
    square's is the foreground of `▀`, the lower's its background; an odd last row's lower
    half is `background`."""

    def color(channel: int) -> str:
        return background if channel == EMPTY else colors[channel]

    rows = []
    for top in range(0, len(grid), 2):
        upper = grid[top]
        lower = grid[top + 1] if top + 1 < len(grid) else [EMPTY] * len(upper)
        rows.append([(color(a), color(b)) for a, b in zip(upper, lower)])
    return rows
