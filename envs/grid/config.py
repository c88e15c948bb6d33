"""The grid world's configuration, checked at the boundary (numpy only, no kernel needed).

`GridConfig` holds what a user chooses; `GridConfig.check()` refuses what cannot work with a
one-line `GridConfigError` naming the field: agents that do not fit the free cells, a window
larger than the map (or wider than the 4-bit token location allows), a bad ASCII layout
(unknown symbol, ragged rows). The kernel (operant.cext.grid), its Python face
(operant.envs.grid.vector) and the pure-Python reference in tests/ all take their map from here.

ASCII layouts: one string, rows separated by newlines (leading/trailing blank lines and
surrounding spaces of the whole block are ignored), `#` a wall, `.` an empty cell, `R` a
resource tile. Agents start on empty cells drawn at every reset.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

EMPTY, WALL, READY = 0, 1, 2
SYMBOLS = {".": EMPTY, "#": WALL, "R": READY}
MAX_WINDOW = 15
"""A token's location is (row << 4 | col) in one byte, and 0xFF marks padding: rows and
columns of the window must fit in 0..14."""


class GridConfigError(ValueError):
    """A grid configuration that cannot work; the message names the field and the fix."""


@dataclass(frozen=True)
class GridConfig:
    """One grid world: `agents` per env on a `width` x `height` map."""

    agents: int = 8
    """Agents per env (rows per env)."""
    width: int = 16
    height: int = 16
    wall_density: float = 0.04
    """Random maps: walls = round(density x cells), at cells drawn at every reset."""
    resource_density: float = 0.06
    """Random maps: resource tiles = round(density x cells)."""
    window: int = 11
    """Each agent sees a window x window square centred on itself (odd, at most 15)."""
    tokens: int = 200
    """Tokens per observation row (MettaGrid's default budget); later ones are dropped."""
    regrow_steps: int = 16
    """A resource is ready again this many steps after it was taken."""
    max_episode_steps: int = 128
    """Every agent of an env is truncated together at this step."""
    layout: str | None = None
    """An ASCII map (see the module docstring); replaces width, height and the densities."""

    def rows(self) -> list[str]:
        """The layout's rows (GridConfigError on ragged rows or unknown symbols)."""
        assert self.layout is not None
        rows = [line.strip() for line in self.layout.strip().splitlines()]
        if not rows or not rows[0]:
            raise GridConfigError("grid layout is empty; give rows of '#', '.' and 'R'")
        for number, row in enumerate(rows):
            if len(row) != len(rows[0]):
                raise GridConfigError(
                    f"grid layout row {number} has {len(row)} cells, row 0 "
                    f"has {len(rows[0])}; every row must be as wide"
                )
            for column, symbol in enumerate(row):
                if symbol not in SYMBOLS:
                    raise GridConfigError(
                        f"grid layout row {number} column {column}: unknown "
                        f"symbol {symbol!r}; use '#' wall, '.' empty, "
                        "'R' resource"
                    )
        return rows

    @property
    def map_width(self) -> int:
        return len(self.rows()[0]) if self.layout is not None else self.width

    @property
    def map_height(self) -> int:
        return len(self.rows()) if self.layout is not None else self.height

    @property
    def num_walls(self) -> int:
        return 0 if self.layout is not None else round(self.wall_density * self.cells)

    @property
    def num_resources(self) -> int:
        return 0 if self.layout is not None else round(self.resource_density * self.cells)

    @property
    def cells(self) -> int:
        return self.map_width * self.map_height

    def layout_cells(self) -> np.ndarray | None:
        """The layout as uint8 cells (row-major: EMPTY, WALL, READY), or None (random maps)."""
        if self.layout is None:
            return None
        return np.array([SYMBOLS[symbol] for row in self.rows() for symbol in row], dtype=np.uint8)

    def free_cells(self) -> int:
        """Cells an agent may start on."""
        cells = self.layout_cells()
        if cells is None:
            return self.cells - self.num_walls - self.num_resources
        return int((cells == EMPTY).sum())

    def check(self) -> GridConfig:
        """Refuse what cannot work (GridConfigError, one line); returns self."""
        for name in (
            "agents",
            "width",
            "height",
            "window",
            "tokens",
            "regrow_steps",
            "max_episode_steps",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise GridConfigError(f"grid {name} must be a positive integer, got {value!r}")
        for name in ("wall_density", "resource_density"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise GridConfigError(f"grid {name} must be in [0, 1), got {getattr(self, name)!r}")
        if self.window % 2 == 0 or self.window > MAX_WINDOW:
            raise GridConfigError(
                f"grid window must be odd and at most {MAX_WINDOW} (token "
                f"locations are 4 bits per axis), got {self.window}"
            )
        if self.window > min(self.map_width, self.map_height):
            raise GridConfigError(
                f"grid window {self.window} is larger than the "
                f"{self.map_width} x {self.map_height} map; use a smaller "
                "window or a larger map"
            )
        if self.cells > 2**31 - 1:
            raise GridConfigError(f"grid map of {self.cells} cells is too large")
        if self.agents > self.free_cells():
            raise GridConfigError(
                f"grid agents = {self.agents} do not fit the "
                f"{self.free_cells()} free cells of the map; use fewer agents, "
                "a larger map or lower densities"
            )
        return self
