"""env.frame_stack (operant.envs.face.frame_stack): k = 1 is the env's own buffer, read by the
policy in place; k > 1 stacks the last k observations of any host family, equal to a stack
rebuilt from the unstacked env's observations step by step, through episode ends."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest
import traced
from gymnasium.vector import AutoresetMode

from operant.envs import make_env
from operant.envs.face.frame_stack import FrameStackEnv
from operant.envs.registry import EnvError
from operant.trainer.config import ConfigError, load_config


def test_frame_stack_1_is_the_kernel_buffer_the_policy_reads():
    from operant.trainer.loop.train import Trainer

    config = load_config(
        None,
        [
            "env.id=MinAtar-Breakout-v1",
            "env.num_envs=8",
            "ppo.num_steps=4",
            "ppo.num_minibatches=2",
            "env.frame_stack=1",
        ],
    )
    trainer = Trainer(config)
    assert not isinstance(trainer.env, FrameStackEnv)
    kernel, storage = trainer.env.kernel, trainer.storage.obs
    seen, written = [], []
    act = trainer.policy.act

    def spy(obs, *args, **kwargs):
        seen.append(obs.data_ptr())
        written.append(kernel.obs_address)  # where operant.cext.minatar's kernel wrote last
        return act(obs, *args, **kwargs)

    trainer.policy.act = spy
    trainer.collect()
    # MinAtar's kernel keeps its observation rows by difference (each step reads the row it
    # wrote before), so it writes its own buffer every step and the policy reads that very
    # memory; the storage's copy of it is the rollout's store, as for any step's outcome.
    assert trainer.env.keeps_obs_rows
    kernel_buffer = trainer.env.obs.ctypes.data
    assert seen == [kernel_buffer] * 4 and written == seen
    assert all(storage[t].data_ptr() != kernel_buffer for t in range(4))


@pytest.mark.parametrize(
    "env_id, depth, impl",
    [
        ("MinAtar-Breakout-v1", 4, "native"),
        ("MinAtar-Freeway-v1", 2, "native"),
        ("CartPole-v1", 3, "native"),
        # Gymnasium's own CartPole: no kernel to write the ring, so it is copied in.
        ("CartPole-v1", 3, "reference"),
    ],
)
def test_stacks_equal_the_last_k_observations_through_episode_ends(env_id, depth, impl):
    num_envs = 11  # a word of eight flags and a tail (push scans both)
    kwargs = {"max_episode_steps": 7} if env_id.startswith("MinAtar") else {}
    stacked = make_env(env_id, num_envs, copy=False, frame_stack=depth, impl=impl, **kwargs)
    plain = make_env(env_id, num_envs, copy=False, impl=impl, **kwargs)
    assert stacked.binds_slots is (impl == "native")
    assert isinstance(stacked, FrameStackEnv) and stacked.actions is stacked.env.actions
    inner_shape = plain.obs_spec.shape
    assert stacked.obs_spec.shape == (depth * inner_shape[0], *inner_shape[1:])
    assert stacked.single_observation_space.shape == stacked.obs_spec.shape
    stacked.reset(seed=3)
    plain.reset(seed=3)
    history = [deque([plain.obs[row].copy()] * depth, maxlen=depth) for row in range(num_envs)]
    rng = np.random.default_rng(0)
    ends = 0
    for _ in range(40):
        actions = rng.integers(0, plain.act_spec.num_actions, num_envs)
        stacked.actions[:] = plain.actions[:] = actions
        stacked.step_bound()
        plain.step_bound()
        for row in range(num_envs):
            if plain.terminated[row] or plain.truncated[row]:
                ends += 1
                history[row].append(plain.final_obs[row].copy())
                np.testing.assert_array_equal(stacked.final_obs[row], np.concatenate(history[row]))
                history[row] = deque([plain.obs[row].copy()] * depth, maxlen=depth)
            else:
                history[row].append(plain.obs[row].copy())
            np.testing.assert_array_equal(stacked.obs[row], np.concatenate(history[row]))
    assert ends >= num_envs
    assert stacked.drain_episode_stats().episodes == ends


@pytest.mark.parametrize(
    "env_id, depth, impl",
    [
        ("MinAtar-Breakout-v1", 4, "native"),  # a packed ring
        ("CartPole-v1", 3, "native"),
        ("CartPole-v1", 3, "reference"),  # Gymnasium's own NEXT_STEP
    ],
)
def test_a_next_step_stack_is_the_stack_of_the_next_step_envs_observations(env_id, depth, impl):
    # What `operant eval --video` plays: step by step over several episodes per row, the
    # stacks equal the last k observations of the unstacked NEXT_STEP env, the step after an
    # ending one (the reset) starting a new stack of its observation k times.
    num_envs = 5
    kwargs = {"max_episode_steps": 7} if env_id.startswith("MinAtar") else {}
    kwargs.update(impl=impl, copy=False, autoreset_mode=AutoresetMode.NEXT_STEP)
    stacked = make_env(env_id, num_envs, frame_stack=depth, **kwargs)
    plain = make_env(env_id, num_envs, **kwargs)
    assert isinstance(stacked, FrameStackEnv) and stacked.next_step and not stacked.binds_slots
    obs, _ = stacked.reset(seed=3)
    first, _ = plain.reset(seed=3)
    history = [deque([first[row].copy()] * depth, maxlen=depth) for row in range(num_envs)]
    np.testing.assert_array_equal(obs, [np.concatenate(rows) for rows in history])
    rng = np.random.default_rng(0)
    ended = np.zeros(num_envs, dtype=bool)
    ends = 0
    for _ in range(100):
        actions = rng.integers(0, plain.act_spec.num_actions, num_envs)
        got = stacked.step(actions)
        want = plain.step(actions)
        for row in range(num_envs):
            if ended[row]:  # this step was its reset: a new stack
                history[row] = deque([want[0][row].copy()] * depth, maxlen=depth)
            else:
                history[row].append(want[0][row].copy())
        np.testing.assert_array_equal(got[0], [np.concatenate(rows) for rows in history])
        for mine, theirs in zip(got[1:4], want[1:4]):
            np.testing.assert_array_equal(mine, theirs)
        ended = want[2] | want[3]
        ends += int(ended.sum())
    assert ends >= 2 * num_envs
    with pytest.raises(EnvError, match="NEXT_STEP frame stack steps through step"):
        stacked.step_bound()


def test_a_next_step_stack_resumes_from_its_state_dict():
    kwargs = {"copy": False, "frame_stack": 2, "autoreset_mode": AutoresetMode.NEXT_STEP}
    first = make_env("CartPole-v1", 4, **kwargs)
    first.reset(seed=1)
    rng = np.random.default_rng(1)
    for _ in range(30):
        first.step(rng.integers(0, 2, 4))
    second = make_env("CartPole-v1", 4, **kwargs)
    second.reset(seed=2)
    second.load_state_dict({name: value.copy() for name, value in first.state_dict().items()})
    for _ in range(40):
        actions = rng.integers(0, 2, 4)
        for mine, theirs in zip(first.step(actions)[:4], second.step(actions)[:4]):
            np.testing.assert_array_equal(mine, theirs)


def test_a_stacked_env_resumes_from_its_state_dict():
    first = make_env("MinAtar-SpaceInvaders-v1", 4, copy=False, frame_stack=4)
    first.reset(seed=1)
    rng = np.random.default_rng(1)
    for _ in range(5):
        first.actions[:] = rng.integers(0, 4, 4)
        first.step_bound()
    second = make_env("MinAtar-SpaceInvaders-v1", 4, copy=False, frame_stack=4)
    second.reset(seed=2)
    second.load_state_dict({name: value.copy() for name, value in first.state_dict().items()})
    for _ in range(10):
        first.actions[:] = second.actions[:] = rng.integers(0, 4, 4)
        first.step_bound()
        second.step_bound()
        np.testing.assert_array_equal(first.obs, second.obs)


@pytest.mark.parametrize("level", [0, 1, 2])
def test_packed_frames_are_numpys_little_endian_bits_and_unpack_to_themselves(level):
    """cext/envs/face/frame_pack.h at each of its levels (portable C, AVX2, AVX-512BW, as far as
    this CPU
    has them): the ring's packed rows are np.packbits(bitorder="little") of the frames,
    zero-padded to whole 8-byte words, for frame sizes off and on the vectors' widths and the
    sizes the row loop unrolls (MinAtar's C x 100)."""
    from operant.cext import frame_stack

    default = frame_stack.PACK_LEVEL
    try:
        chosen = frame_stack.pack_level(level)
        assert chosen <= level
        rng = np.random.default_rng(level)
        for size in (1, 7, 8, 31, 32, 33, 63, 64, 65, 100, 399, 400, 600, 700, 1000, 1001):
            frames = (rng.random((5, size)) < 0.3).astype(np.uint8)
            width = frame_stack.packed_bytes(size)
            assert width % 8 == 0 and width * 8 >= size > width * 8 - 64
            packed = np.full((5, width), 0xAB, np.uint8)
            frame_stack.pack(frames, packed)
            bits = np.packbits(frames, axis=1, bitorder="little")
            expected = np.zeros((5, width), np.uint8)
            expected[:, : bits.shape[1]] = bits
            np.testing.assert_array_equal(packed, expected)
            back = np.full_like(frames, 7)
            frame_stack.unpack(packed, back)
            np.testing.assert_array_equal(back, frames)
    finally:
        frame_stack.pack_level(default)
    assert default == frame_stack.PACK_LEVEL


def test_a_binary_frame_ring_keeps_bits_and_a_float_one_keeps_its_values():
    breakout = make_env("MinAtar-Breakout-v1", 8, copy=False, frame_stack=4)
    assert breakout.packed and breakout.ring.shape == (4, 8, 56)  # 400 cells: 7 words
    cartpole = make_env("CartPole-v1", 8, copy=False, frame_stack=4, impl="reference")
    assert not cartpole.packed and cartpole.ring.shape == (4, 8, 4)


def test_frame_stack_0_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"env\.frame_stack: Expected `int` >= 1"):
        load_config(None, ["env.frame_stack=0"])
    with pytest.raises(EnvError, match=r"env\.frame_stack = 0: it must be .* at least 1"):
        make_env("CartPole-v1", 2, frame_stack=0)


def test_operant_train_refuses_frame_stack_0_with_exit_2(tmp_path, capsys):
    from operant.trainer.run.main import main

    status = main(
        ["--env", "MinAtar-Breakout-v1", "--set", "env.frame_stack=0", "--runs-dir", str(tmp_path)]
    )
    err = capsys.readouterr().err.strip()
    assert status == 2 and len(err.splitlines()) == 1
    assert "env.frame_stack" in err and ">= 1" in err


def test_the_trainer_stores_stacked_uint8_frames():
    from operant.trainer.loop.train import Trainer

    config = load_config(
        None,
        [
            "env.id=MinAtar-Breakout-v1",
            "env.num_envs=4",
            "env.frame_stack=4",
            "ppo.num_steps=8",
            "ppo.num_minibatches=2",
            "train.total_steps=64",
        ],
    )
    trainer = Trainer(config)
    assert trainer.policy.convs[0].in_channels == 16
    record = trainer.run()
    assert record.global_step == 64
    storage = trainer.storage.obs
    assert storage.dtype.itemsize == 1 and storage.shape == (8, 4, 16, 10, 10)
    # Channel 0 of each stacked frame is the paddle: one per frame, four frames per stack.
    assert int(storage[:, :, ::4].sum(dim=(-1, -2)).min()) == 1


@pytest.mark.parametrize("depth", [1, 4])
def test_stepping_allocates_nothing_after_warm_up(depth):
    """Env-only steps of a stacked MinAtar env, with the ring only (`live_obs` false, as the
    trainer steps it) and with `obs` kept current: no byte allocated after warm-up."""
    env = make_env("MinAtar-Breakout-v1", 256, copy=False, frame_stack=depth)
    env.reset(seed=0)
    actions = np.random.default_rng(0).integers(0, 3, (8, 256))
    for live in (False, True):
        if depth > 1:
            env.live_obs = live
        for step in range(20):  # warm-up, through episode ends
            np.copyto(env.actions, actions[step % 8])
            env.step_bound()
        found = traced.windows(lambda: _steps(env, actions, 200), until=(1, 1024))
        assert traced.clean(found, held_below=1, peak_below=1024), (live, found)


def _steps(env, actions, count: int) -> None:
    for step in range(count):
        np.copyto(env.actions, actions[step % len(actions)])
        env.step_bound()


def test_the_ring_reads_as_the_stacks_when_obs_is_not_kept_current():
    live = make_env("MinAtar-Asterix-v1", 8, copy=False, frame_stack=4, max_episode_steps=9)
    ring = make_env("MinAtar-Asterix-v1", 8, copy=False, frame_stack=4, max_episode_steps=9)
    ring.live_obs = False
    live.reset(seed=1)
    ring.reset(seed=1)
    stale = ring.obs.copy()
    rng = np.random.default_rng(1)
    truncations = 0
    for _ in range(25):
        live.actions[:] = ring.actions[:] = rng.integers(0, 5, 8)
        live.step_bound()
        ring.step_bound()
        np.testing.assert_array_equal(ring.obs, stale)  # not written while stepping
        # Final stacks for the truncated rows (a trainer bootstraps from no other).
        truncated = live.truncated
        np.testing.assert_array_equal(ring.final_obs[truncated], live.final_obs[truncated])
        truncations += int(truncated.sum())
    assert truncations > 0
    # The state and Gymnasium's step() write the stacks first.
    np.testing.assert_array_equal(ring.state_dict()["frame_stack.obs"], live.obs)
    action = rng.integers(0, 5, 8)
    np.testing.assert_array_equal(ring.step(action)[0], live.step(action)[0])


@pytest.mark.parametrize("depth", [1, 4])
# MinAtar's kernel writes its rows by difference (each step reads the row it wrote before);
# CartPole's writes whole rows, so its observations are bound to the slots (or the ring).
@pytest.mark.parametrize("by_difference", [False, True], ids=["whole-rows", "by-difference"])
def test_a_bound_stacked_rollout_fills_the_storage_as_the_copying_one(
    monkeypatch, depth, by_difference
):
    """The trainer binds a stacked native env to its storage: the inner kernel writes the
    ring, rewards and flags into the storage, and the stacks go to the storage's rows; the
    storage is the same as with the copying path. A kernel that keeps its observation rows
    by difference (`keeps_obs_rows`) writes its own buffer, copied into the storage (k = 1)
    or the ring (k = 4), and the rest stays bound."""
    import torch

    import operant.trainer.loop.collect as collect
    from operant.envs.minatar.vector import MinAtarVectorEnv
    from operant.trainer.loop.train import Trainer

    assert MinAtarVectorEnv.keeps_obs_rows

    config = load_config(
        None,
        [
            "env.id=" + ("MinAtar-Breakout-v1" if by_difference else "CartPole-v1"),
            "env.num_envs=8",
            f"env.frame_stack={depth}",
            "env.max_episode_steps=6",
            "ppo.num_steps=8",
            "train.seed=3",
        ],
    )
    filled = []
    for bound in (False, True):
        with monkeypatch.context() as patch:
            if not bound:
                patch.setattr(collect, "bindable", lambda env, storage: False)
            trainer = Trainer(config)
        assert trainer.collector.bound is bound
        inner = getattr(trainer.env, "env", trainer.env)
        assert trainer.collector.obs_bound is (bound and (depth > 1 or not by_difference))
        if depth > 1:
            assert trainer.env.writes_ring is not by_difference
        assert not by_difference or inner.kernel.obs_address == inner.obs.ctypes.data
        runs = []
        for _ in range(3):
            trainer.collect()
            storage = trainer.storage
            runs.append([getattr(storage, name).clone() for name in ("obs", "rewards", "dones")])
        filled.append(runs)
    for copied, bound in zip(*filled):
        for before, after in zip(copied, bound):
            assert torch.equal(before, after)
