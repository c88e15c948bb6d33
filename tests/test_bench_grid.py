"""operant bench env_only on Grid-v0: --validate runs its two observation encoders in shadow
(exit 2 on any byte mismatch), --profile records its per-phase step timings."""

import json

from operant.envs.grid.vector import GridVectorEnv
from operant.trainer.bench import cli as bench_module

TINY = ["--env", "Grid-v0", "--num-envs", "4", "--rounds", "2", "--round-seconds", "0.02"]


def run(tmp_path, *extra):
    out = tmp_path / "grid.json"
    status = bench_module.main(["env_only", *TINY, "--max-cv", "10", "--output", str(out), *extra])
    return status, json.loads(out.read_text())


def test_validate_compares_both_encoders_and_implies_no_gymnasium(tmp_path, capsys):
    status, record = run(tmp_path, "--validate", "--validate-steps", "30")
    assert status == 0
    (report,) = record["validation"]
    agents = GridVectorEnv(1).layout.num_rows
    assert report["ok"] and report["mismatched_bytes"] == 0
    assert report["compared"] == 30 * 4 * agents
    assert "gymnasium" not in record["results"][0] and record["results"][0]["native"]["median"] > 0
    assert "--no-gymnasium implied" in capsys.readouterr().out


def test_an_encoder_mismatch_exits_2_and_measures_nothing(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(GridVectorEnv, "obs_mismatches", property(lambda self: 3))
    status, record = run(tmp_path, "--validate", "--validate-steps", "5")
    assert status == bench_module.EXIT_PARITY == 2
    assert record["validation"][0]["mismatched_bytes"] == 3 and "results" not in record
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "operant bench: --validate: Grid-v0's two observation encoders disagree; "
        "nothing was measured"
    ]


def test_profile_records_every_phase_over_the_measured_rounds(tmp_path, capsys):
    from operant.cext.grid import PHASES

    status, record = run(tmp_path, "--profile")
    assert status == 0
    profile = record["results"][0]["profile"]
    assert list(profile["phase_ns"]) == list(PHASES) and profile["steps"] > 0
    assert sum(profile["phase_ns"].values()) > 0
    assert profile["phase_ns_per_step"] == {
        phase: round(ns / profile["steps"], 1) for phase, ns in profile["phase_ns"].items()
    }
    assert "profile Grid-v0" in capsys.readouterr().out


def test_profile_of_an_env_without_step_timing_is_refused_in_one_line(capsys):
    status = bench_module.main(["env_only", "--num-envs", "4", "--profile", "--no-gymnasium"])
    assert status == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "operant bench: --profile: CartPole-v1 has no per-phase step timing (Grid-v0 has)"
    ]
