"""The checkpoint file format on its own: version 2's explicit layout, and the migration that
lets files written by version 1 (main at 6031fcf) load as version 2."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from operant.trainer.checkpoint import file_format as checkpoint_format
from operant.trainer.checkpoint.file_format import CheckpointError
from operant.trainer.checkpoint.state import capture_global_rng
from operant.trainer.config import load_config, to_dict
from operant.trainer.loop.train import Trainer

# Written by main at 6031fcf (the format-1 layout is the same on every CPU; the file is the
# one recorded on the first machine, tests/fixtures/main-6031fcf/record.sh).
MAIN_CHECKPOINT = (
    Path(__file__).parent
    / "fixtures"
    / "main-6031fcf"
    / "AuthenticAMD-AVX512"
    / "ckpt-000000020.pt"
)
SMALL = [
    "env.num_envs=8",
    "ppo.num_steps=32",
    "ppo.num_minibatches=2",
    "ppo.update_epochs=2",
    "train.total_steps=4096",
    "normalize.obs=true",
    "normalize.reward=true",
]


def small_trainer() -> Trainer:
    built = Trainer(load_config(None, SMALL))
    built.started = time.perf_counter()
    built.train_update()
    return built


def as_version_1(payload: dict) -> dict:
    """A version-2 payload laid out as version 1 wrote it (found by reflection)."""
    state = payload["trainer"]
    modules = {
        name: state[name]
        for name in ("policy", "optimizer", "obs_normalizer", "reward_normalizer")
        if name in state
    }
    old = {
        "modules": modules,
        "optimizers": {},
        "generators": {name: state[name] for name in ("generator", "cpu_generator")},
        "counters": state["counters"],
        "env": state["env"],
    }
    converted = {**payload, "version": 1, "trainer": old}
    converted["digest"] = checkpoint_format.content_digest(converted)
    return converted


def equal(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    return a == b


def test_the_checkpoint_main_wrote_loads_as_version_2():
    raw = torch.load(MAIN_CHECKPOINT, weights_only=True)
    assert raw["version"] == 1 and raw["trainer"]["optimizers"] == {}
    payload = checkpoint_format.load(MAIN_CHECKPOINT)
    assert payload["version"] == checkpoint_format.VERSION == 2
    state = payload["trainer"]
    assert set(state) == {"policy", "optimizer", "generator", "cpu_generator", "counters", "env"}
    assert equal(state["policy"], raw["trainer"]["modules"]["policy"])
    assert equal(state["optimizer"], raw["trainer"]["modules"]["optimizer"])
    assert equal(state["cpu_generator"], raw["trainer"]["generators"]["cpu_generator"])
    assert state["counters"] == {
        "global_step": 40960,
        "update": 20,
        "episodes": 492,
        "elapsed_s": raw["trainer"]["counters"]["elapsed_s"],
        "solved_at": None,
    }
    assert state["env"]["impl"] == "native" and state["env"]["exact"] is True
    assert payload["digest"] == checkpoint_format.content_digest(payload)
    assert equal(payload["rng"], raw["rng"]) and payload["progress_bytes"] == 11938


def test_a_version_1_file_migrates_to_what_version_2_writes(tmp_path):
    trainer = small_trainer()
    written = checkpoint_format.build_payload(
        trainer.state_dict(), capture_global_rng(), to_dict(trainer.config), 7
    )
    old = tmp_path / "old.pt"
    torch.save(as_version_1(written), old)
    migrated = checkpoint_format.load(old)
    assert equal(migrated, written)
    fresh = Trainer(load_config(None, SMALL))
    fresh.load_state_dict(migrated["trainer"])
    assert fresh.update == 1 and torch.equal(
        fresh.obs_normalizer.stats.mean, trainer.obs_normalizer.stats.mean
    )


@pytest.mark.parametrize(
    "damage, message",
    [
        (
            lambda old: old["trainer"].pop("generators"),
            "a version 1 checkpoint without its 'generators' part",
        ),
        (
            lambda old: old["trainer"]["optimizers"].update(adam={}),
            "its trainer.optimizers is not empty",
        ),
    ],
)
def test_a_version_1_file_that_main_did_not_write_is_refused_in_one_line(tmp_path, damage, message):
    trainer = small_trainer()
    old = as_version_1(
        checkpoint_format.build_payload(
            trainer.state_dict(), capture_global_rng(), to_dict(trainer.config), 0
        )
    )
    damage(old)
    old["digest"] = checkpoint_format.content_digest(old)
    path = tmp_path / "old.pt"
    torch.save(old, path)
    with pytest.raises(CheckpointError) as error:
        checkpoint_format.load(path)
    assert str(error.value).startswith(f"{path}: ") and message in str(error.value)
    assert "\n" not in str(error.value)


def test_a_version_older_than_any_migration_is_refused(tmp_path):
    path = tmp_path / "ancient.pt"
    payload = {"format": checkpoint_format.FORMAT, "version": 0, "metrics_layout": (1, 0)}
    payload["digest"] = checkpoint_format.content_digest(payload)
    torch.save(payload, path)
    with pytest.raises(
        CheckpointError,
        match="checkpoint format 0, this operant reads 2; "
        "resume it with the operant version that wrote it",
    ):
        checkpoint_format.load(path)


def test_a_state_with_other_names_is_refused_naming_them():
    trainer = small_trainer()
    state = trainer.state_dict()
    del state["obs_normalizer"]
    state["encoder"] = {}
    with pytest.raises(
        CheckpointError,
        match="the checkpoint's trainer state lacks "
        "obs_normalizer and has encoder which this "
        "trainer does not",
    ):
        Trainer(load_config(None, SMALL)).load_state_dict(state)
