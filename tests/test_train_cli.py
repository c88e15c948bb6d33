"""operant-train end to end: bad input, the JSON-lines contract, run directories, learning."""

import json
import os
import subprocess
import sys

import msgspec
import pytest

from operant.trainer.config import ConfigError, derive, load_config
from operant.trainer.loop.train import Trainer


def run_train(*args, runs_dir, timeout=240):
    env = dict(os.environ, OPERANT_RUNS_DIR=str(runs_dir))
    return subprocess.run(
        [sys.executable, "-m", "operant.trainer.run.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--set", "ppo.learnin_rate=0.1"],
         "ppo: unknown key `learnin_rate`; did you mean `learning_rate`?"),
        (["--set", "ppo.zzz=1"], "ppo: unknown key `zzz`"),
        (["--set", "trian.seed=1"],
         "unknown section `trian`; did you mean `train`? (sections: env, policy, "),
        (["--set", "env.num_envs=many"], "env.num_envs: Expected `int`, got `str`"),
        (["--set", "ppo.gamma=1.5"], "ppo.gamma: Expected `float` <= 1"),
        (["--set", "env.num_envs=0"], "env.num_envs: Expected `int` >= 1"),
        # accepted once, then a run that failed (inf), or a segfault (100,000 threads)
        (["--set", "ppo.learning_rate=inf"], "ppo.learning_rate: Expected a finite `float`"),
        (["--set", "policy.log_std_init=1e30"], "policy.log_std_init: Expected `float` <= 20"),
        (["--set", "train.torch_threads=100000"], "train.torch_threads: Expected `int` <= 1024"),
        (["--env", ""], "env.id: Expected `str` of length >= 1"),  # said as a bad run id
        (["--env", "NoSuchEnv-v0"], "unknown env id 'NoSuchEnv-v0'"),
        (["--set", "ppo.num_minibatches=7"], "ppo.num_minibatches = 7 must divide the batch"),
        (["--set", "nonsense"], "expected section.key=value"),
        (["--config", "/nonexistent/x.toml"], "config file /nonexistent/x.toml does not exist"),
        (["--total-steps", "ten"], "argument --total-steps: invalid int value"),
        (["--env", "Acrobot-v1", "--set", "env.workers=2"], "env.workers = 2 is for Python envs"),
        (["--set", "foo.bar=1"],
         "config (with --set): unknown section `foo` (sections: env, policy, normalize, ppo, "
         "train, checkpoint)"),
        (["--set", "train.dist_backend=foo"],
         "train.dist_backend: Invalid enum value 'foo' (choices: auto, gloo, nccl)"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    result = run_train(*args, runs_dir=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert message in lines[0]
    assert "Traceback" not in result.stderr
    assert not any(tmp_path.iterdir())  # nothing was started


def test_bad_toml_file_names_the_file(tmp_path):
    config = tmp_path / "bad.toml"
    config.write_text("[ppo\nlearning_rate = 1\n")
    with pytest.raises(ConfigError, match="bad.toml: not valid TOML"):
        load_config(config)
    config.write_text("[ppo]\nlearning_rate = 'fast'\n")
    with pytest.raises(ConfigError, match=r"bad.toml: ppo.learning_rate: Expected `float`"):
        load_config(config)


def test_config_layers_file_flags_and_set(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[env]\nnum_envs = 8\n[ppo]\nnum_steps = 16\ngamma = 0.9\n")
    config = load_config(
        path, ["ppo.gamma=0.95", "policy.hidden_sizes=[32, 16]"], {"train": {"seed": 9}}
    )
    assert (config.env.num_envs, config.ppo.num_steps, config.ppo.gamma) == (8, 16, 0.95)
    assert config.policy.hidden_sizes == [32, 16] and config.train.seed == 9
    assert derive(config).batch_size == 128


def test_json_lines_contract_and_run_directory(tmp_path):
    result = run_train(
        "--total-steps",
        "8192",
        "--seed",
        "3",
        "--log-format",
        "json",
        "--run-id",
        "contract",
        runs_dir=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    updates = [line for line in lines if "update" in line]
    assert [u["update"] for u in updates] == [1, 2, 3, 4]
    for record in updates:
        assert {"global_step", "sps", "episode_return_mean", "elapsed_s"} <= record.keys()
        assert record["sps"] > 0
        assert set(record["phase_s"]) == {"env", "forward", "store", "gae", "update", "publish"}
    assert updates[-1]["global_step"] == 8192
    assert lines[-1]["summary"]["global_step"] == 8192
    run_dir = tmp_path / "contract"
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["env_id"] == "CartPole-v1" and meta["config"]["train"]["seed"] == 3
    progress = [json.loads(line) for line in (run_dir / "progress.jsonl").read_text().splitlines()]
    assert [p["global_step"] for p in progress] == [2048, 4096, 6144, 8192]
    assert (run_dir / "model.pt").stat().st_size > 0
    assert os.readlink(tmp_path / "latest") == "contract"


def _records(seed, total_steps=8192):
    config = load_config(overrides=[f"train.seed={seed}", f"train.total_steps={total_steps}"])
    records = []
    Trainer(config, log=records.append).run()
    return [
        {
            k: v
            for k, v in msgspec.to_builtins(r).items()
            if k not in ("sps", "sps_mean", "elapsed_s", "phase_s")
        }
        for r in records
    ]


def test_same_seed_same_run():
    first, second = _records(11), _records(11)
    assert first == second
    assert first != _records(12)


def test_learns_cartpole_on_a_short_budget():
    """The default config, 80K steps: clearly learning (random play averages ~22). Over seeds
    1-20 the last-100 mean at 80K steps ranged 146-309 (torch update) and 155-309 (native),
    medians 232 and 231; seed 1 gave 209 and 195: the bar sits below every one of those
    40 runs rather than at one seed's luck."""
    config = load_config(overrides=["train.seed=1", "train.total_steps=81920"])
    last = Trainer(config).run()
    assert last.global_step == 81920
    assert last.episode_return_mean >= 140, last


def test_none_clears_an_optional_key_and_a_string_key_keeps_the_word():
    # TOML has no null, so a resumed run's saved target could not be taken away: a solved run
    # resumed to train further stopped again after one update
    config = load_config(
        "configs/CartPole-v1.toml",
        [
            "train.target_return=None",
            "checkpoint.every_seconds=null",
            "ppo.target_kl=none",
            "env.info_mode=none",
            "train.run_id=none",
        ],
    )
    assert config.train.target_return is None and config.checkpoint.every_seconds is None
    assert config.ppo.target_kl is None
    assert config.env.info_mode == "none" and config.train.run_id == "none"
