"""operant bench reads only the options of the mode it runs: one given to another mode is
refused in one line, not ignored; `trainer --nproc-per-node` applies the trainer's env and
batch flags to its torchrun runs and judges them as a trainer record. Speeds are never
asserted (the target below is one no machine reaches, to see the exit status)."""

import json

import pytest

from tests.test_bench import bench


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["env_only", "--config", "configs/CartPole-v1.toml"],
            "--config is not an option of env_only (it is for trainer and trainer_eval)",
        ),
        (["trainer", "--impl", "torch"], "--impl is not an option of trainer (it is for env_only)"),
        (["env_only", "--seeds", "3"], "--seeds is not an option of env_only"),
        (["trainer_eval", "--seeds", "1,2"], "trainer_eval measures one seed's rollouts"),
        (["trainer_eval", "--no-bound"], "--no-bound is not an option of trainer_eval"),
        (["trainer", "--weak-scaling"], "--weak-scaling goes with trainer --nproc-per-node"),
        (
            ["trainer", "--nproc-per-node", "1", "--plot", "plots"],
            "--plot is not an option of trainer --nproc-per-node",
        ),
        (
            ["trainer", "--nproc-per-node", "1", "--max-mem-delta", "5"],
            "--max-mem-delta is not an option of trainer --nproc-per-node",
        ),
        (
            ["trainer", "--nproc-per-node", "1", "--set", "env.num_envs=0"],
            "env.num_envs",  # the config, refused before the first torchrun starts
        ),
    ],
)
def test_an_option_of_another_mode_is_refused_in_one_line(args, message):
    result = bench(*args)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_ranks_runs_train_the_given_env_and_batch_and_are_judged(tmp_path):
    # --env, --num-envs, --num-steps reach the torchrun run (it trained Acrobot, 4 x 32 a
    # rollout: 16 updates of 128 steps); an enforced target it misses exits 1, the record
    # written first.
    out = tmp_path / "ranks.json"
    result = bench(
        "trainer", "--nproc-per-node", "1", "--env", "Acrobot-v1", "--num-envs", "4",
        "--num-steps", "32", "--seeds", "1", "--total-steps", "2048", "--target-sps", "1e15",
        "--enforce-target", "--output", str(out),
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert "below the target of 1,000,000,000,000,000 steps/s" in result.stderr
    record = json.loads(out.read_text())
    (run,) = record["runs"]
    assert run["env_id"] == "Acrobot-v1" and run["global_step"] == 2048 and run["ranks"] == 1
    assert record["ranks"]["1"]["sps"]["median"] == round(run["sps_mean"], 1)


def test_a_memory_limit_nothing_was_held_to_fails(tmp_path):
    # Two updates, both inside --warmup 5: no growth after warm-up was measured, so the limit
    # cannot pass (it passed silently before).
    result = bench(
        "trainer", "--num-envs", "16", "--num-steps", "64", "--total-steps", "2048",
        "--seeds", "1", "--warmup", "5", "--no-bound", "--max-cv", "10",
        "--max-mem-delta", "100",
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert "--max-mem-delta 100: nothing measured (no run trained past --warmup 5" in result.stderr


def test_the_cv_limit_is_said_as_given():
    # --max-cv 0.00001 read "exceeds 0%"
    result = bench(
        "env_only", "--num-envs", "16", "--rounds", "3", "--round-seconds", "0.02",
        "--no-gymnasium", "--max-cv", "0.00001",
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert "unstable: a coefficient of variation exceeds 0.001%" in result.stderr
