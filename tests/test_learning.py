"""The shipped per-env configs (configs/*.toml): every one loads, and each learns.

Each learning test runs the shipped config unchanged (its learning-rate schedule included)
with a fixed seed and stops it after a short budget of steps, then checks the mean return
of the last 100 episodes against a threshold set well below what was measured there
(docs/learning.md has the full runs to each env's target and the measurements behind these).
"""

from pathlib import Path

import pytest

from operant.trainer.config import derive, load_config
from operant.trainer.loop.train import Trainer

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = sorted((ROOT / "configs").glob("*.toml"))
SHIPPED_ENVS = {
    "CartPole-v1",
    "Acrobot-v1",
    "Pendulum-v1",
    "MountainCarContinuous-v0",
    "MountainCar-v0",
    "Grid-v0",  # its learning test: tests/test_grid_learning.py
}


def test_there_is_a_config_for_every_env():
    assert {path.stem for path in CONFIGS} == SHIPPED_ENVS


@pytest.mark.parametrize(
    "path",
    [
        *CONFIGS,
        # configs/sweeps/ holds sweep files (operant sweep), not training configs
        *sorted(p for p in (ROOT / "configs").glob("*/*.toml") if p.parent.name != "sweeps"),
        ROOT / "deploy" / "cartpole.toml",
    ],
    ids=lambda path: f"{path.parent.name}/{path.name}",
)
def test_config_loads_and_derives(path):
    config = load_config(path)
    derived = derive(config)
    assert derived.num_updates >= 1
    if path.parent.name in ("configs", "throughput"):
        # The file is named for its env, and trains it on the fast kernel.
        assert config.env.id == path.stem
        assert config.env.impl == "native"


def run_for(env_id: str, steps: int, seed: int = 1) -> tuple[float, float]:
    """Train configs/<env_id>.toml for `steps` env steps; (first, last) last-100 means."""
    config = load_config(
        ROOT / "configs" / f"{env_id}.toml",
        [
            f"train.seed={seed}",
            "train.target_return=1e9",
            "train.torch_threads=1",
            "train.publish_metrics=false",
        ],
    )
    trainer = Trainer(config)
    means = []

    def stop() -> bool:
        record = trainer.last_record
        means.append(record.episode_return_mean if record is not None else None)
        return trainer.global_step >= steps

    trainer.run(stop)
    seen = [mean for mean in means if mean is not None]
    return seen[0], seen[-1]


# (env, steps, threshold, measured on seeds 1 / 2 at that budget on the 2-core dev machine)
LEARNING = [
    ("CartPole-v1", 80_000, 150.0),  # 199 / 216; untrained ~22
    ("Acrobot-v1", 100_000, -200.0),  # -152 / -156; untrained -500
    ("Pendulum-v1", 80_000, -700.0),  # -495 / -467; untrained ~-1200
    ("MountainCarContinuous-v0", 100_000, 60.0),  # 85 / 86; standing still ~0
    ("MountainCar-v0", 100_000, -190.0),  # -160 / -180 (seed 3: -156); untrained -200
]


@pytest.mark.parametrize("env_id, steps, threshold", LEARNING, ids=[row[0] for row in LEARNING])
def test_shipped_config_learns(env_id, steps, threshold):
    first, last = run_for(env_id, steps)
    assert last >= threshold, f"{env_id}: last-100 mean {last:.1f} after {steps:,} steps"
    assert last > first, f"{env_id}: no improvement ({first:.1f} -> {last:.1f})"


def test_throughput_config_solves_cartpole():
    """configs/throughput/CartPole-v1.toml trains to its target (mean of the last 100
    episodes >= 475) inside its budget; seed 1 solved at 1.26M steps when measured."""
    config = load_config(
        ROOT / "configs" / "throughput" / "CartPole-v1.toml",
        ["train.seed=1", "train.torch_threads=1", "train.publish_metrics=false"],
    )
    trainer = Trainer(config)
    last = trainer.run()
    assert trainer.solved_at is not None, f"last-100 mean {last.episode_return_mean}"
    assert last.episode_return_mean >= 475.0
    assert last.global_step < config.train.total_steps
