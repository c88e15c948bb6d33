"""The checkpoint module on its own: exact continuation for every env implementation, what
the file holds and how it is loaded, pruning, and cleaning up after a writer that died."""

from __future__ import annotations

import os
import time

import msgspec
import pytest
import torch

from operant.trainer.checkpoint import file_format as checkpoint_format
from operant.trainer.checkpoint import state
from operant.trainer.checkpoint import store as checkpoint
from operant.trainer.config import load_config, to_dict
from operant.trainer.loop.train import Trainer

SMALL = [
    "env.num_envs=8",
    "ppo.num_steps=32",
    "ppo.num_minibatches=2",
    "ppo.update_epochs=2",
    "train.total_steps=4096",
]


def trainer(*overrides: str) -> Trainer:
    built = Trainer(load_config(None, [*SMALL, *overrides]))
    built.started = time.perf_counter()
    return built


def updates(run: Trainer, count: int) -> list[dict]:
    records = [msgspec.to_builtins(run.train_update()) for _ in range(count)]
    for record in records:
        del record["elapsed_s"], record["sps"], record["sps_mean"], record["phase_s"]
    return records


@pytest.mark.parametrize(
    "impl, overrides",
    [
        ("native", ()),
        ("torch", ()),
        ("native", ("normalize.obs=true", "normalize.reward=true")),
        ("native", ('env.id="Pendulum-v1"',)),  # the native Gaussian head
        # a MinAtar frame through the MLP, read natively, its gradient shared by two threads
        (
            "native",
            ('env.id="MinAtar-Breakout-v1"', 'policy.kind="mlp"', "ppo.update_threads=2"),
        ),
    ],
)
def test_a_loaded_checkpoint_continues_bit_for_bit(tmp_path, impl, overrides):
    original = trainer(f"env.impl={impl}", *overrides)
    updates(original, 3)
    saver = checkpoint.Checkpointer(tmp_path, None, None, keep=2)
    path = saver.save(original, to_dict(original.config), progress_bytes=123)
    payload = checkpoint_format.load(path)
    assert payload["progress_bytes"] == 123 and payload["trainer"]["counters"]["update"] == 3
    assert payload["trainer"]["env"]["exact"] is True

    resumed = trainer(f"env.impl={impl}", *overrides)
    resumed.load_state_dict(payload["trainer"])
    state.restore_global_rng(payload["rng"])
    assert updates(resumed, 3) == updates(original, 3)
    for a, b in zip(original.policy.parameters(), resumed.policy.parameters()):
        assert torch.equal(a, b)
    normalizers = (
        {"obs_normalizer", "reward_normalizer"}
        if overrides[:1] == ("normalize.obs=true",)
        else set()
    )
    assert set(payload["trainer"]) == {
        "policy",
        "optimizer",
        *normalizers,
        "generator",
        "cpu_generator",
        "counters",
        "env",
    }


def test_reference_envs_resume_reseeded_not_exactly(tmp_path):
    original = trainer("env.impl=reference")
    updates(original, 2)
    path = checkpoint.Checkpointer(tmp_path, None, None, keep=1).save(
        original, to_dict(original.config), 0
    )
    payload = checkpoint_format.load(path)
    assert payload["trainer"]["env"] == {
        "impl": "reference",
        "exact": False,
        "arrays": {},
        "dtypes": {},
    }
    resumed = trainer("env.impl=reference")
    resumed.load_state_dict(payload["trainer"])
    assert (resumed.update, resumed.global_step) == (2, 2 * 256)
    assert updates(resumed, 1)[0]["update"] == 3


def test_checkpoint_holds_only_tensors_and_plain_containers(tmp_path):
    run = trainer()
    updates(run, 1)
    path = checkpoint.Checkpointer(tmp_path, None, None, keep=1).save(run, to_dict(run.config), 0)

    def kinds(value) -> set[type]:
        if isinstance(value, dict):
            return {dict}.union(*(kinds(k) | kinds(v) for k, v in value.items()))
        if isinstance(value, (list, tuple)):
            return {type(value)}.union(*(kinds(item) for item in value))
        return {type(value)}

    payload = torch.load(path, weights_only=True)  # no pickled objects: this is the proof
    assert kinds(payload) <= {dict, list, tuple, torch.Tensor, str, int, float, bool, type(None)}
    assert payload["format"] == "operant-checkpoint" and payload["config"]["train"]["seed"] == 1


def test_keeps_the_newest_k_and_points_latest_at_the_newest(tmp_path):
    run = trainer()
    saver = checkpoint.Checkpointer(tmp_path, every_updates=2, every_seconds=None, keep=2)
    saved = []
    for _ in range(6):
        updates(run, 1)
        if saver.due(run.update):
            saved.append(saver.save(run, to_dict(run.config), 0).name)
    assert saved == ["ckpt-000000002.pt", "ckpt-000000004.pt", "ckpt-000000006.pt"]
    assert [path.name for path in checkpoint.checkpoint_files(tmp_path)] == saved[1:]
    assert (tmp_path / "latest").read_text() == "ckpt-000000006.pt\n"
    assert checkpoint.find_checkpoint(tmp_path).name == "ckpt-000000006.pt"
    assert not saver.due(run.update)  # never twice for one update


def test_leftovers_of_a_dead_writer_are_removed_and_never_chosen(tmp_path):
    run = trainer()
    updates(run, 1)
    saver = checkpoint.Checkpointer(tmp_path, None, None, keep=3)
    saver.save(run, to_dict(run.config), 0)
    (tmp_path / ".ckpt-000000002.pt.4242.tmp").write_bytes(b"half a checkpoint")
    (tmp_path / ".latest.4242.tmp").write_text("ckpt-000000002.pt\n")
    updates(run, 1)
    saver.save(run, to_dict(run.config), 0)
    (tmp_path / "latest").unlink()  # as if killed before the pointer's rename
    assert checkpoint.find_checkpoint(tmp_path).name == "ckpt-000000002.pt"
    checkpoint.Checkpointer(tmp_path, None, None, keep=3).remove_leftovers(newer_than=1)
    assert sorted(os.listdir(tmp_path)) == ["ckpt-000000001.pt"]


def test_a_resume_refusal_says_values_as_toml_and_set_write_them(tmp_path):
    import tomllib

    from operant.trainer.checkpoint.file_format import CheckpointError
    from operant.trainer.checkpoint.store import check_compatible
    from operant.trainer.config import Config, to_dict, toml_value

    values = [None, False, True, 3, 0.5, 'say "hi"', [64, 64], {"agents": 2, "name": "a"}]
    assert [toml_value(value) for value in values] == [
        "none", "false", "true", "3", "0.5", '"say \\"hi\\""', "[64, 64]",
        '{ agents = 2, name = "a" }',
    ]  # fmt: skip
    # What it writes reads back (TOML has no null: --set takes none for it).
    for value in values[1:]:
        assert tomllib.loads(f"v = {toml_value(value)}")["v"] == value
    changed = Config()
    changed.normalize.obs = True
    with pytest.raises(CheckpointError) as refused:
        check_compatible(tmp_path / "ckpt-000000001.pt", to_dict(Config()), changed)
    assert str(refused.value).startswith(
        "ckpt-000000001.pt was written with normalize.obs = false, but the config says true; "
    )
