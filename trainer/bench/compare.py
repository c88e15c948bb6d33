"""Comparing a bench record: ratios to earlier records (--baseline) and the exit status a
record earns (unstable, below an enforced --target-sps, memory grown after warm-up)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from operant.trainer.bench.measure import _label
from operant.trainer.run.errors import counted

EXIT_OK, EXIT_UNSTABLE = 0, 1


def _load_baselines(paths: list[str], mode: str) -> list[tuple[str, dict[str, Any]]]:
    """The --baseline records, refused up front (before any measuring) when unusable."""
    baselines = []
    for path in paths:
        try:
            with open(path) as handle:
                record = json.load(handle)
        except FileNotFoundError:
            raise ValueError(f"baseline {path} does not exist") from None
        except (OSError, json.JSONDecodeError) as error:
            raise ValueError(f"baseline {path} is not a bench JSON record ({error})") from None
        if not isinstance(record, dict) or record.get("mode") != mode:
            found = record.get("mode") if isinstance(record, dict) else None
            raise ValueError(f"baseline {path} is a {found!r} record, not {mode!r}")
        baselines.append((path, record))
    return baselines


def _comparable(record: dict[str, Any]) -> dict[str, float]:
    """Median steps/s by what was measured: '<mode> <cell>', or '<impl> N=<num_envs>'."""
    if record["mode"] != "env_only":
        return {
            f"{record['mode']} {_label(cell['cell'])}": cell["summary"]["sps"]["median"]
            for cell in record["cells"]
        }
    impls = [part for part in record["args"]["impl"].split(",") if part]
    return {
        f"{impl} N={row['num_envs']}": row[impl]["median"]
        for row in record["results"]
        for impl in impls
        if impl in row
    }


def compare(
    record: dict[str, Any], baselines: list[tuple[str, dict[str, Any]]]
) -> list[dict[str, Any]]:
    """This run's medians over each baseline's, for every measurement both have."""
    ours = _comparable(record)
    comparisons: list[dict[str, Any]] = []
    env = measured_env(record)
    for path, baseline in baselines:
        if measured_env(baseline) not in (None, env):
            # an Acrobot run "1.07x" a CartPole record: no ratio of different envs
            print(f"vs {path}: it measured {measured_env(baseline)}, this run {env}: no ratio")
            comparisons.append({"baseline": path, "ratios": {}, "env": measured_env(baseline)})
            continue
        theirs = _comparable(baseline)
        ratios = {
            key: round(ours[key] / theirs[key], 3)
            for key in ours
            if key in theirs and theirs[key] > 0
        }
        comparisons.append({"baseline": path, "ratios": ratios})
        text = (
            ", ".join(f"{key} {ratio:.2f}x" for key, ratio in ratios.items()) or "nothing in common"
        )
        print(f"vs {path}: {text}", flush=True)
    return comparisons


def measured_env(record: dict[str, Any]) -> str | None:
    """The env a record measured: env_only's --env, a trainer mode's runs' env id (None for
    a record that does not say)."""
    if record.get("mode") == "env_only":
        return record.get("args", {}).get("env")
    for cell in record.get("cells", ()):
        for run in cell.get("runs", ()):
            if run.get("env_id"):
                return str(run["env_id"])
    return None


def _status(record: dict[str, Any], args: argparse.Namespace) -> int:
    status = EXIT_OK
    medians = _medians(record)
    if any(cv > args.max_cv for _, cv in medians):
        print(
            f"operant bench: unstable: a coefficient of variation exceeds {100 * args.max_cv:g}%",
            file=sys.stderr,
        )
        status = EXIT_UNSTABLE
    if (
        args.target_sps is not None
        and args.enforce_target
        and any(median < args.target_sps for median, _ in medians)
    ):
        print(f"operant bench: below the target of {args.target_sps:,.0f} steps/s", file=sys.stderr)
        status = EXIT_UNSTABLE
    if args.max_mem_delta is not None:
        grown = _mem_delta(record)
        if grown is None:  # no run trained past --warmup: a limit nothing was held to
            print(
                f"operant bench: --max-mem-delta {args.max_mem_delta:g}: nothing measured (no "
                f"run trained past --warmup {counted(args.warmup, 'update')}); lower --warmup "
                "or raise --total-steps",
                file=sys.stderr,
            )
            status = EXIT_UNSTABLE
        elif grown > args.max_mem_delta:
            print(
                f"operant bench: resident memory grew by {grown:.1f} MB after warm-up "
                f"(--max-mem-delta {args.max_mem_delta:g})",
                file=sys.stderr,
            )
            status = EXIT_UNSTABLE
    return status


def _mem_delta(record: dict[str, Any]) -> float | None:
    if record["mode"] == "env_only":
        return record.get("mem_delta_mb")
    deltas = [
        cell["summary"]["mem_delta_mb_max"]
        for cell in record["cells"]
        if cell["summary"]["mem_delta_mb_max"] is not None
    ]
    return max(deltas) if deltas else None


def _medians(record: dict[str, Any]) -> list[tuple[float, float]]:
    """(median, cv) of what decides the exit status: every env_only measurement; the best
    configuration of a trainer mode (with --matrix, unstable cells are simply not chosen)."""
    if "ranks" in record:  # trainer --nproc-per-node: every K
        return [(row["sps"]["median"], row["sps"]["cv"]) for row in record["ranks"].values()]
    if record["mode"] != "env_only":
        return [(record["summary"]["sps"]["median"], record["summary"]["sps"]["cv"])]
    impls = [part for part in record["args"]["impl"].split(",") if part]
    return [(row[impl]["median"], row[impl]["cv"]) for row in record["results"] for impl in impls]
