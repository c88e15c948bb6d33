"""The env contract holds by construction: two families written against
operant.envs.contract alone (tests/families: uint8 C x H x W frames with a CNN, and 4 agents
per env with per-agent episodes) train through the real `operant-train` with a policy they
registered, checkpoint, resume bit for bit, and publish to the monitor; the loop is the one
every other env trains through."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from operant.envs.contract import RowLayout
from operant.envs.face.episodes import EpisodeAccounting
from operant.trainer.config import ConfigError, load_config

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # `tests.families.*`, as the subprocesses see it

FRAMES = "tests.families.frame:Frames-v0"
AGENTS = "tests.families.agents:Agents-v0"
# (env id, overrides, rows per step): small batches, a fixed learning rate (a resumed run
# with a larger budget would otherwise anneal on another schedule).
FAMILIES = {
    "frames": (FRAMES, ["env.num_envs=8", "ppo.num_steps=16"], 8),
    "agents": (AGENTS, ["env.num_envs=4", "ppo.num_steps=16", "policy.kind=agent-mlp"], 16),
}
COMMON = ["ppo.anneal_lr=false", "ppo.num_minibatches=2", "train.publish_metrics=true"]
UPDATES, CHECKPOINTED_AT = 6, 3
TIMING = {"elapsed_s", "sps", "sps_mean", "phase_s"}


def _environ() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "OPERANT_RUNS_DIR"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def operant_train(runs: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "operant.trainer.run.main",
            "--runs-dir",
            str(runs),
            "--quiet",
            *args,
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=_environ(),
        timeout=240,
    )


def train_new(runs: Path, run_id: str, family: str, updates: int) -> None:
    env_id, overrides, rows = FAMILIES[family]
    sets = [item for value in [*overrides, *COMMON] for item in ("--set", value)]
    result = operant_train(
        runs,
        "--env",
        env_id,
        "--run-id",
        run_id,
        "--seed",
        "5",
        "--total-steps",
        str(updates * rows * 16),
        *sets,
    )
    assert result.returncode == 0, result.stderr


def progress(runs: Path, run_id: str) -> list[dict]:
    lines = (runs / run_id / "progress.jsonl").read_text().splitlines()
    return [
        {key: value for key, value in json.loads(line).items() if key not in TIMING}
        for line in lines
    ]


@pytest.mark.parametrize("family", FAMILIES)
def test_family_trains_resumes_bit_exact_and_publishes(tmp_path, family):
    runs = tmp_path / "runs"
    rows = FAMILIES[family][2]
    train_new(runs, "whole", family, UPDATES)
    train_new(runs, "split", family, CHECKPOINTED_AT)
    checkpoints = sorted(path.name for path in (runs / "split" / "checkpoints").glob("ckpt-*"))
    assert checkpoints == [f"ckpt-{CHECKPOINTED_AT:09d}.pt"]
    resumed = operant_train(runs, "--resume", "split", "--total-steps", str(UPDATES * rows * 16))
    assert resumed.returncode == 0, resumed.stderr

    whole = progress(runs, "whole")
    assert [record["update"] for record in whole] == list(range(1, UPDATES + 1))
    assert [record["global_step"] for record in whole] == [
        update * rows * 16 for update in range(1, UPDATES + 1)
    ]
    assert whole[-1]["episodes"] > 0 and whole[-1]["episode_return_mean"] is not None
    assert progress(runs, "split") == whole  # everything but timing, bit for bit

    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "operant",
            "monitor",
            "split",
            "--runs-dir",
            str(runs),
            "--once",
            "--json",
        ],
        capture_output=True,
        text=True,
        env=_environ(),
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    state = json.loads(shown.stdout)
    assert (state["run_id"], state["status"]) == ("split", "finished")
    assert state["global_step"] == UPDATES * rows * 16
    assert state["episode_return_mean"] == pytest.approx(whole[-1]["episode_return_mean"])

    # operant eval builds the run's policy through the registry from the env's specs.
    evaluated = subprocess.run(
        [
            sys.executable,
            "-m",
            "operant",
            "eval",
            "whole",
            "--runs-dir",
            str(runs),
            "--episodes",
            "5",
            "--num-envs",
            "2",
            "--json",
        ],
        capture_output=True,
        text=True,
        env=_environ(),
        cwd=REPO,
        timeout=120,
    )
    assert evaluated.returncode == 0, evaluated.stderr
    report = json.loads(evaluated.stdout)
    assert (report["env_id"], report["episodes"]) == (FAMILIES[family][0], 5)
    assert 0 <= report["return_min"] <= report["return_mean"] <= report["return_max"]


def test_frames_stay_uint8_from_env_to_storage_and_the_registered_cnn_reads_them():
    from operant.trainer.loop.train import Trainer

    config = load_config(
        None,
        [
            f"env.id={FRAMES}",
            "env.num_envs=4",
            "ppo.num_steps=8",
            "ppo.num_minibatches=2",
            "train.total_steps=64",
            "policy.kind=tiny-cnn",
        ],
    )
    trainer = Trainer(config)
    assert type(trainer.policy).__name__ == "TinyCNN"  # the family's own, chosen by name
    trainer.collect()
    storage = trainer.storage
    assert storage.obs.dtype == torch.uint8 and storage.obs.shape == (8, 4, 2, 8, 8)
    # Every stored frame has one lit pixel in channel 0, exactly as the env drew it.
    assert torch.all((storage.obs[:, :, 0] == 255).sum(dim=(-1, -2)) == 1)
    flat = storage.flat()
    assert flat.obs.shape == (32, 2, 8, 8) and flat.obs.dtype == torch.uint8
    assert torch.equal(flat.obs[5], storage.obs[1, 1])
    assert flat.actions.shape == (32,) and flat.values.shape == (32,)


def test_agents_are_rows_and_the_batch_counts_them():
    from operant.trainer.loop.train import Trainer

    config = load_config(
        None,
        [
            f"env.id={AGENTS}",
            "env.num_envs=3",
            "ppo.num_steps=8",
            "ppo.num_minibatches=2",
            "train.total_steps=192",
        ],
    )
    trainer = Trainer(config)
    assert type(trainer.policy).__name__ == "ActorCritic"  # "auto": flat float32 -> the MLP
    assert trainer.storage.obs.shape == (8, 12, 8)
    assert trainer.derived.batch_size == 96 and trainer.derived.num_updates == 2
    record = trainer.run()
    assert record.global_step == 192 and record.updates == 2


def test_the_mlp_reads_frames_flattened_when_named():
    """policy.kind = "mlp" on byte frames: "auto" would choose the CNN; named, the MLP reads
    the (2, 8, 8) frames as 128 byte inputs and trains (natively where the kernel is built)."""
    from operant.trainer.loop.train import Trainer

    config = load_config(
        None,
        [
            f"env.id={FRAMES}",
            "env.num_envs=4",
            "ppo.num_steps=8",
            "ppo.num_minibatches=2",
            "train.total_steps=64",
            "policy.kind=mlp",
        ],
    )
    trainer = Trainer(config)
    assert type(trainer.policy).__name__ == "ActorCritic"
    assert trainer.policy.byte_obs and trainer.policy.obs_dim == 2 * 8 * 8
    assert trainer.storage.obs.dtype == torch.uint8  # no float copy of the rollout
    assert trainer.native is not None and trainer.native.byte_obs
    record = trainer.run()
    assert record.global_step == 64 and record.updates == 2


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        (["policy.kind=nope"], "policy.kind = 'nope' is not a registered policy"),
        (["policy.kind=token"], "policy.kind = 'token' cannot read uint8 (2, 8, 8) observations"),
        (["normalize.obs=true"], "normalize.obs = true needs floating-point observations"),
    ],
)
def test_a_policy_or_normaliser_that_does_not_fit_the_spec_is_refused(overrides, fragment):
    from operant.trainer.loop.train import Trainer

    config = load_config(
        None,
        [
            f"env.id={FRAMES}",
            "env.num_envs=4",
            "ppo.num_steps=8",
            "train.total_steps=64",
            *overrides,
        ],
    )
    with pytest.raises(ConfigError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        Trainer(config)


def test_the_cli_refuses_it_in_one_line_with_exit_2(tmp_path):
    result = operant_train(tmp_path, "--env", FRAMES, "--set", "normalize.obs=true")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"operant-train: normalize.obs = true needs floating-point observations, and {FRAMES} "
        "has uint8 (2, 8, 8) ones: set normalize.obs = false"
    ]
    assert not list(tmp_path.glob("*/progress.jsonl"))  # refused before any run started


def test_episode_accounting_per_agent_and_per_env():
    accounting = EpisodeAccounting(RowLayout(num_envs=2, agents_per_env=2), ring_capacity=4)
    no = np.zeros(4, dtype=bool)
    accounting.record(np.array([1, 2, 3, 4], np.float32), no, no)
    # Env 0's agents end (terminated), env 1's go on.
    accounting.record(np.array([1, 1, 1, 1], np.float32), np.array([1, 1, 0, 0], bool), no)
    saved = {name: value.copy() for name, value in accounting.state_dict().items()}
    stats = accounting.drain()
    assert (stats.episodes, stats.return_sum, stats.return_min, stats.return_max) == (2, 5, 2, 3)
    assert (stats.length_min, stats.length_max) == (2, 2)
    per_env = stats.per_env
    assert (per_env.episodes, per_env.return_sum, per_env.length_sum) == (1, 5, 2)
    assert accounting.drain().episodes == 0
    # Env 1 is truncated a step later: its return is its agents' sum.
    accounting.record(np.array([0, 0, 1, 1], np.float32), no, np.array([0, 0, 1, 1], bool))
    stats = accounting.drain()
    assert (stats.episodes, stats.return_sum) == (2, 11)
    per_env = stats.per_env
    assert (per_env.episodes, per_env.return_max, per_env.length_max) == (1, 11, 3)
    assert accounting.recent_returns(10).tolist() == [2, 3, 5, 6]
    accounting.load_state_dict(saved)  # back to before the first drain
    assert accounting.drain().per_env.return_sum == 5
    assert accounting.recent_returns(3).tolist() == [2, 3]
    with pytest.raises(ValueError, match="'ring' is float64 \\(3,\\)"):
        accounting.load_state_dict({**saved, "ring": np.zeros(3)})


def test_optional_capabilities_are_declared_protocols_not_probed_attributes():
    """What the trainer reads beyond BatchEnv is a Protocol of envs/contract.py, tested with
    isinstance: each family declares what it has, and a layer forwards a family's extras but
    binds slots or steps halves only where it says so itself (tests/test_env_contract_use.py:
    trainer/ probes no env attribute by name)."""
    from operant.envs import make_env
    from operant.envs.contract import (
        BindsSlots,
        ComparesEncoders,
        DeclaresTimeLimit,
        ShadowChecked,
        StepsInHalves,
    )

    protocols = (BindsSlots, DeclaresTimeLimit, ShadowChecked, ComparesEncoders, StepsInHalves)
    overlapped = (("overlap", True),)
    expected = {
        ("CartPole-v1", ()): (True, True, False, False, False),
        ("CartPole-v1", overlapped): (True, True, False, False, True),
        # info_mode's layer declares the halves itself (HalvesInfoModeEnv); binding it does not
        ("CartPole-v1", (*overlapped, ("info_mode", "full"))): (False, True, False, False, True),
        ("MinAtar-Breakout-v1", ()): (True, True, True, False, False),
        ("Grid-v0", ()): (False, False, False, True, False),
        ("MinAtar-Breakout-v1", (("frame_stack", 2),)): (True, True, True, False, False),
        ("MinAtar-Breakout-v1", (("info_mode", "full"),)): (False, True, True, False, False),
    }
    for (env_id, options), has in expected.items():
        env = make_env(env_id, 4, copy=False, **dict(options))
        try:
            assert tuple(isinstance(env, p) for p in protocols) == has, (env_id, options)
        finally:
            env.close()
