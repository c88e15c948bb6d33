"""benchmarks/bench_grid_vs_mettagrid.py: the matched configuration and the Operant half give
values for it; the MettaGrid half is skipped, and says so, without the peer venv (and runs,
tiny, when it is there). Speed is the benchmark's, never asserted here."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--rounds", "2", "--round-seconds", "0.01", "--warmup-seconds", "0.01", "--batch", "3"]


def load_bench():
    name = "bench_grid_vs_mettagrid"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


bench = load_bench()


def test_the_layout_is_mettagrids_benchmark_map_a_border_and_64_walls_inside():
    rows = bench.matched_layout(40, 0.04, seed=42).splitlines()
    cells = np.array([list(row) for row in rows])
    assert cells.shape == (40, 40)
    border = np.concatenate([cells[0], cells[-1], cells[1:-1, 0], cells[1:-1, -1]])
    assert (border == "#").all() and len(border) == 156
    assert (cells[1:-1, 1:-1] == "#").sum() == int(40 * 40 * 0.04) == 64
    assert set(cells.ravel()) == {"#", "."}
    assert bench.matched_layout(40, 0.04, seed=42) == "\n".join(rows)
    assert bench.matched_layout(40, 0.04, seed=7) != "\n".join(rows)


def test_the_operant_env_has_the_matched_config_and_random_moves_and_noops():
    runner = bench.OperantBench(2, bench.grid_options(20), round_seconds=0.01, warmup_seconds=0.01)
    env = runner.env
    assert env.obs.shape == (40, 200, 3) and env.config.window == 11
    assert env.config.resource_density == 0.0 and env.config.max_episode_steps == bench.NEVER
    assert runner.ring.min() == 0 and runner.ring.max() == 4 and runner.ring.shape[1] == 40
    assert not env.truncated.any()


def test_the_operant_half_gives_rates_and_tokens_for_20_and_100_agents(capsys):
    args = bench.parse(["--agents", "20,100", *TINY, "--mettagrid-python", "/nonexistent"])
    python = bench.peer_python(args.mettagrid_python)
    assert python is None
    results = bench.side_by_side(args, python)
    assert list(results) == ["20", "100"]
    for agents, row in results.items():
        assert row["agents"] == int(agents)
        for name in ("operant_n1", "operant_n3"):
            assert len(row[name]["rounds"]) == 2 and min(row[name]["rounds"]) > 0
            assert row[name]["median"] > 0
            # the global token plus at least the agent itself (object, orientation)
            assert 3 <= row[name]["tokens_used_mean"] <= 200
        assert row["mettagrid"].startswith("skipped: no MettaGrid venv")
        assert not [key for key in row if "_vs_" in key or key.startswith("mettagrid_")]
    out = capsys.readouterr().out
    assert "agents= 20" in out and "agents=100" in out


def test_the_operant_profile_has_every_phase_per_world_step():
    args = bench.parse(["--agents", "20", *TINY, "--mettagrid-python", "/nonexistent"])
    (row,) = bench.profiled(args, None).values()
    phases = row["operant"]["phase_ns_per_step"]
    assert list(phases) == list(bench.OPERANT_PHASES)
    assert phases["observations"] > 0 and phases["actions"] > 0
    assert row["operant"]["wall_ns_per_step"] > 0 and "mettagrid" not in row


@pytest.mark.skipif(
    bench.peer_python(bench.DEFAULT_PEER_PYTHON) is None,
    reason="no MettaGrid peer venv (benchmarks/peers/setup_mettagrid.sh)",
)
def test_the_mettagrid_half_serves_rounds_with_the_same_config():
    peer = bench.PeerBench(
        bench.DEFAULT_PEER_PYTHON,
        20,
        "sim",
        ["--round-seconds", "0.01", "--warmup-seconds", "0.01", "--profile"],
    )
    assert peer.meta["num_tokens"] == 200 and peer.meta["window"] == 11
    assert peer.meta["num_actions"] == 5 and peer.meta["walls_inside"] == 64
    assert peer.round() > 0
    summary = peer.close()
    assert summary["agent_steps_per_s"] == peer.rates
    assert set(peer.round_phases[0]) == set(bench.METTAGRID_PHASES)
    assert peer.round_phases[0]["observations"] > 0
