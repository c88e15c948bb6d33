"""`operant bench --plot DIR`: the PNGs docs/journal/ shows, drawn from a bench record
(matplotlib, imported only when plotting)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from operant.trainer.bench.measure import _short_label

PHASE_COLORS = {
    "env": "#4c72b0",
    "forward": "#55a868",
    "store": "#c44e52",
    "gae": "#8172b2",
    "update": "#ccb974",
    "publish": "#64b5cd",
}


def plot(record: dict[str, Any], directory: Path) -> list[Path]:
    """The PNGs for a record: env_only, steps/s against num_envs per implementation; trainer
    modes, the phase breakdown per configuration and, for a matrix, steps/s against
    num_envs per (num_steps, minibatches)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    machine_text = f"{record['machine']['cpus']} CPUs, torch {record['machine']['torch']}"
    if record["mode"] == "env_only":
        return [_plot_env_only(plt, record, directory, machine_text)]
    written = [_plot_phases(plt, record, directory, machine_text)]
    cells = record["cells"]
    if len(cells) > 1 and all("num_envs" in cell["cell"] for cell in cells):
        written.append(_plot_matrix(plt, record, directory, machine_text))
    return written


def _plot_env_only(plt: Any, record: dict[str, Any], directory: Path, machine_text: str) -> Path:
    """Env steps/s against num_envs, one line per implementation and Gymnasium's."""
    figure, axes = plt.subplots(figsize=(7, 4.2))
    rows = record["results"]
    impls = [part for part in record["args"]["impl"].split(",") if part]
    xs = [row["num_envs"] for row in rows]
    for impl in [*impls, "gymnasium"]:
        if all(impl in row for row in rows):
            axes.plot(
                xs,
                [row[impl]["median"] / 1e6 for row in rows],
                marker="o",
                label=f"operant {impl}" if impl != "gymnasium" else "Gymnasium vector env",
            )
    axes.set_xscale("log", base=2)
    axes.set_xlabel("num_envs")
    axes.set_ylabel("env steps/s (millions), one core")
    axes.set_title(f"{record['args']['env']}: env-only throughput ({machine_text})")
    axes.grid(alpha=0.3)
    axes.legend()
    path = directory / f"env_only_{record['args']['env']}.png"
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _plot_phases(plt: Any, record: dict[str, Any], directory: Path, machine_text: str) -> Path:
    """One stacked bar per configuration: the fraction of time each phase took."""
    cells = record["cells"]
    key = "phase_s_mean" if record["mode"] == "trainer" else "phase_fraction"
    figure, axes = plt.subplots(figsize=(8, 0.45 * len(cells) + 2.2))
    labels = [_short_label(cell["cell"]) for cell in cells]
    lefts = [0.0] * len(cells)
    for name, color in PHASE_COLORS.items():
        shares = []
        for cell in cells:
            phases = cell["summary"].get(key, {})
            total = sum(phases.values()) or 1.0
            shares.append(phases.get(name, 0.0) / total)
        if any(shares):
            axes.barh(labels, shares, left=lefts, color=color, label=name)
            lefts = [left + share for left, share in zip(lefts, shares)]
    axes.set_xlim(0, 1)
    axes.set_xlabel("fraction of time")
    axes.set_title(f"{record['mode']}: where the time goes\n({machine_text})", fontsize="medium")
    figure.legend(*axes.get_legend_handles_labels(), ncol=6, fontsize="small", loc="lower center")
    path = directory / f"phases_{record['mode']}.png"
    figure.tight_layout(rect=(0, 0.07, 1, 1))
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _plot_matrix(plt: Any, record: dict[str, Any], directory: Path, machine_text: str) -> Path:
    """Steps/s against num_envs, one line per (num_steps, minibatches); a hollow marker is a
    training cell where not every seed solved."""
    figure, axes = plt.subplots(figsize=(7, 4.2))
    groups: dict[str, list[tuple[int, float, bool]]] = {}
    for cell in record["cells"]:
        rest = {k: v for k, v in cell["cell"].items() if k != "num_envs"}
        groups.setdefault(_short_label(rest), []).append(
            (
                cell["cell"]["num_envs"],
                cell["summary"]["sps"]["median"] / 1e3,
                cell["summary"]["all_solved"],
            )
        )
    for label, points in groups.items():
        points.sort()
        (line,) = axes.plot([p[0] for p in points], [p[1] for p in points], label=label)
        for x, y, solved in points:
            axes.plot(
                [x],
                [y],
                marker="o",
                color=line.get_color(),
                markerfacecolor=line.get_color() if solved else "white",
            )
    axes.set_xscale("log", base=2)
    axes.set_xlabel("num_envs")
    axes.set_ylabel("steps/s (thousands)")
    axes.set_title(
        f"{record['mode']}: steps/s by configuration\n({machine_text}"
        + ("; hollow: not every seed solved)" if record["mode"] == "trainer" else ")"),
        fontsize="medium",
    )
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    path = directory / f"matrix_{record['mode']}.png"
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
