"""What every env implementation promises besides its dynamics: determinism per seed and per
env, episode statistics, time limits, no allocation per native step, no host sync per torch
step."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch
import traced

from operant.envs import ENVS, make_env

IMPLS = ["native", "torch"]


def _actions(env, rng, count):
    if env.discrete:
        return rng.integers(0, env.single_action_space.n, size=count)
    high = float(env.single_action_space.high[0])
    return rng.uniform(-high, high, size=(count, *env.single_action_space.shape)).astype(np.float32)


def _load(env, actions):
    if env.impl == "torch":
        env.actions.copy_(torch.from_numpy(actions))
    else:
        env.actions[:] = actions


def _host(value):
    return value.cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)


def _rollout(env_id, impl, seed, num_envs=64, steps=250):
    env = make_env(env_id, num_envs, impl=impl, copy=False)
    first_obs = _host(env.reset(seed=seed)[0]).copy()
    rng = np.random.default_rng(0)
    observations, rewards = [first_obs], []
    for _ in range(steps):
        _load(env, _actions(env, rng, num_envs))
        env.step_bound()
        observations.append(_host(env.obs).copy())
        rewards.append(_host(env.rewards).copy())
    return np.stack(observations), np.stack(rewards), env.drain_episode_stats()


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("env_id", list(ENVS))
def test_same_seed_same_trajectories_and_every_env_has_its_own_stream(env_id, impl):
    obs, rewards, stats = _rollout(env_id, impl, seed=5)
    again_obs, again_rewards, again_stats = _rollout(env_id, impl, seed=5)
    np.testing.assert_array_equal(obs, again_obs)
    np.testing.assert_array_equal(rewards, again_rewards)
    assert stats == again_stats
    assert not np.array_equal(obs, _rollout(env_id, impl, seed=6)[0])
    # No two envs start alike (MountainCar's velocity starts at 0 for all; its position differs).
    initial = obs[0]
    assert len(np.unique(initial, axis=0)) == initial.shape[0]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("env_id", list(ENVS))
def test_reset_without_seed_continues_the_streams(env_id, impl):
    env = make_env(env_id, 16, impl=impl, copy=True)
    first = _host(env.reset(seed=1)[0])
    second = _host(env.reset()[0])
    assert not np.array_equal(first, second)
    np.testing.assert_array_equal(_host(env.reset(seed=1)[0]), first)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("env_id", list(ENVS))
def test_truncation_at_gymnasiums_time_limit_and_episode_statistics(env_id, impl):
    limit = gymnasium.spec(env_id).max_episode_steps
    env = make_env(env_id, 4, impl=impl, copy=False)
    assert env.max_episode_steps == limit
    env.reset(seed=0)
    # Every env is one step from the limit with a known return so far.
    lengths = env.kernel.episode_length if impl == "native" else env.episode_length
    returns = env.kernel.episode_return if impl == "native" else env.episode_return
    lengths[:] = limit - 1
    returns[:] = (
        torch.tensor([-3.0, 1.0, 2.0, 10.0])
        if impl == "torch"
        else np.array([-3.0, 1.0, 2.0, 10.0])
    )
    rng = np.random.default_rng(0)
    _load(env, _actions(env, rng, 4))
    env.step_bound()
    truncated = _host(env.truncated)
    rewards = _host(env.rewards).astype(np.float64)
    assert truncated.all()
    stats = env.drain_episode_stats()
    expected_returns = np.array([-3.0, 1.0, 2.0, 10.0]) + rewards
    assert stats.episodes == 4
    assert stats.length_sum == 4 * limit and stats.length_min == stats.length_max == limit
    assert stats.return_sum == pytest.approx(expected_returns.sum(), abs=1e-5)
    assert stats.return_min == pytest.approx(expected_returns.min(), abs=1e-5)
    assert stats.return_max == pytest.approx(expected_returns.max(), abs=1e-5)
    np.testing.assert_allclose(env.recent_returns(10), expected_returns, atol=1e-5)
    # A drain empties the statistics; the new episodes start from zero.
    assert env.drain_episode_stats().episodes == 0
    assert (_host(lengths) == 0).all() and (_host(returns) == 0).all()


@pytest.mark.parametrize("impl", IMPLS)
def test_recent_returns_ring_keeps_the_latest_in_env_order(impl):
    env = make_env("CartPole-v1", 3, impl=impl, copy=False)
    env.reset(seed=0)
    returns = env.kernel.episode_return if impl == "native" else env.episode_return
    lengths = env.kernel.episode_length if impl == "native" else env.episode_length
    expected = []
    for round_index in range(400):  # 1,200 episodes: the 1,024-slot ring wraps
        lengths[:] = 499
        values = [round_index * 3.0, round_index * 3.0 + 1, round_index * 3.0 + 2]
        returns[:] = (
            torch.tensor(values, dtype=torch.float64) if impl == "torch" else np.array(values)
        )
        _load(env, np.array([0, 1, 0]))
        env.step_bound()
        expected.extend(value + 1.0 for value in values)
    np.testing.assert_array_equal(env.recent_returns(5), expected[-5:])
    np.testing.assert_array_equal(env.recent_returns(5000), expected[-1024:])
    assert env.drain_episode_stats().episodes == 1200


@pytest.mark.parametrize("env_id", list(ENVS))
def test_native_step_allocates_nothing(env_id):
    env = make_env(env_id, 4096, impl="native", copy=False)
    env.reset(seed=1)
    env.actions[:] = _actions(env, np.random.default_rng(0), 4096)
    for _ in range(50):
        env.step_bound()
    kernel = env.kernel
    # Any per-step allocation would show up 1,000 times over; what remains is the
    # interpreter's own bookkeeping for the loop (a few dozen bytes, independent of steps).
    found = traced.windows(traced.repeat(kernel.step, 1000), until=(256, 1024))
    assert traced.clean(found, held_below=256, peak_below=1024), found


@pytest.mark.parametrize("env_id", list(ENVS))
def test_torch_step_never_reads_the_device_from_the_host(env_id, monkeypatch):
    """With deferred action checks (the default on accelerators) `step` and `step_bound` must
    not synchronise: every way a tensor's value reaches Python raises here."""
    env = make_env(env_id, 32, impl="torch", copy=False, action_checks="deferred")
    env.reset(seed=0)
    actions = torch.from_numpy(_actions(env, np.random.default_rng(0), 32))

    def refuse(*args, **kwargs):
        raise AssertionError("host sync inside a torch env step")

    for name in ("item", "tolist", "numpy", "cpu", "__bool__", "__int__", "__float__", "__index__"):
        monkeypatch.setattr(torch.Tensor, name, refuse)
    for _ in range(60):
        env.step(actions)
        env.step_bound()
    monkeypatch.undo()
    assert env.drain_episode_stats().episodes >= 0


@pytest.mark.parametrize("env_id", list(ENVS))
def test_torch_buffers_stay_in_place_on_their_device(env_id):
    """The buffers live on the requested device and keep their identity across steps, so the
    trainer can hold references to them."""
    env = make_env(env_id, 8, impl="torch", device="cpu", copy=False)
    buffers = [env.actions, env.obs, env.rewards, env.terminated, env.truncated, env.final_obs]
    pointers = [buffer.data_ptr() for buffer in buffers]
    obs, _ = env.reset(seed=0)
    assert obs.data_ptr() == env.obs.data_ptr()
    env.step(env.actions.clone())
    assert [buffer.data_ptr() for buffer in buffers] == pointers
    assert all(buffer.device == torch.device("cpu") for buffer in buffers)
    assert env.obs.dtype == torch.float32 and env.state.dtype == torch.float64


def _kernel_buffers(env_id, num_envs, obs=None):
    """Buffers a kernel for `env_id` accepts, with `obs` (and final_obs) replaced if given."""
    env = make_env(env_id, num_envs, impl="native", copy=False)
    obs = env.obs if obs is None else obs
    return env.entry.native, (
        num_envs,
        env.actions,
        obs,
        env.rewards,
        env.terminated,
        env.truncated,
        np.zeros_like(obs),
    )


@pytest.mark.parametrize("env_id", list(ENVS))
@pytest.mark.parametrize(
    "wrong", ["float64", "uint8 bytes", "one column more", "row shape", "fortran"]
)
def test_kernel_refuses_an_observation_buffer_it_did_not_declare(env_id, wrong):
    """The C batch takes observation rows of any dtype and shape as bytes, so binding checks
    the buffer against what the kernel declares (float32 (obs_dim,) here) and names both."""
    obs_dim = gymnasium.spec(env_id).make().observation_space.shape[0]
    obs = {
        "float64": np.zeros((8, obs_dim), np.float64),
        # the same number of bytes per row, but not float32 rows
        "uint8 bytes": np.zeros((8, 4 * obs_dim), np.uint8),
        "one column more": np.zeros((8, obs_dim + 1), np.float32),
        "row shape": np.zeros((8, obs_dim, 1), np.float32),
        "fortran": np.asfortranarray(np.zeros((8, obs_dim), np.float32)),
    }[wrong]
    kernel_class, args = _kernel_buffers(env_id, 8, obs)
    with pytest.raises(
        ValueError,
        match=rf"buffer obs must be a writeable C-contiguous float32 "
        rf"array of shape \(8, {obs_dim}\) .*got ",
    ):
        kernel_class(*args)


@pytest.mark.parametrize("env_id", list(ENVS))
def test_kernel_statistics_are_the_contract_record_by_name(env_id):
    """`stats` is one op_episode_stats record whose numpy dtype is the contract's; the drained
    EpisodeStats is read from it by field name."""
    from operant.envs.contract import EPISODE_STATS_DTYPE

    env = make_env(env_id, 16, impl="native", copy=False)
    assert env.kernel.stats.dtype == EPISODE_STATS_DTYPE and env.kernel.stats.shape == (1,)
    assert env.kernel.stats["return_min"][0] == np.inf
    assert env.kernel.stats["length_max"][0] == -np.inf
    env.reset(seed=3)
    record = env.kernel.stats
    record["episodes"], record["return_sum"], record["length_sum"] = 2.0, -7.5, 30.0
    record["return_min"], record["return_max"] = -5.0, -2.5
    record["length_min"], record["length_max"] = 10.0, 20.0
    stats = env.drain_episode_stats()
    assert (stats.episodes, stats.return_sum, stats.return_min, stats.return_max) == (
        2,
        -7.5,
        -5.0,
        -2.5,
    )
    assert (stats.length_sum, stats.length_min, stats.length_max) == (30.0, 10.0, 20.0)
    assert env.drain_episode_stats().episodes == 0
    assert env.kernel.stats["return_min"][0] == np.inf


@pytest.mark.parametrize("impl", IMPLS + ["overlap"])
def test_state_dict_round_trip_continues_bit_for_bit(impl):
    """load_state_dict(state_dict()) taken mid-episode makes a fresh env continue exactly as
    the original does (observations, rewards, and the drained statistics)."""
    kwargs = {"impl": "native", "overlap": True} if impl == "overlap" else {"impl": impl}
    original = make_env("CartPole-v1", 16, copy=False, **kwargs)
    original.reset(seed=11)
    rng = np.random.default_rng(2)
    for _ in range(40):
        _load(original, _actions(original, rng, 16))
        original.step_bound()
    saved = {
        name: value.clone() if isinstance(value, torch.Tensor) else value.copy()
        for name, value in original.state_dict().items()
    }
    if impl != "torch":
        assert saved["half0.stats" if impl == "overlap" else "kernel.stats"].dtype == np.float64
    resumed = make_env("CartPole-v1", 16, copy=False, **kwargs)
    resumed.load_state_dict(saved)
    for _ in range(60):
        actions = _actions(original, rng, 16)
        for env in (original, resumed):
            _load(env, actions)
            env.step_bound()
        np.testing.assert_array_equal(_host(resumed.obs), _host(original.obs))
        np.testing.assert_array_equal(_host(resumed.rewards), _host(original.rewards))
    assert resumed.drain_episode_stats() == original.drain_episode_stats()


@pytest.mark.parametrize(
    ("env_id", "impl"),
    [("CartPole-v1", "native"), ("CartPole-v1", "torch"), ("MinAtar-Breakout-v1", "native")],
)
def test_a_next_step_env_restored_where_an_episode_just_ended_resets_it_next(env_id, impl):
    # (the face's pending resets were not in the dict: a restored env stepped the ended env
    # on, and every later step of it differed)
    def make():
        return make_env(env_id, 8, impl=impl, autoreset_mode="NextStep", max_episode_steps=7)

    original = make()
    original.reset(seed=3)
    rng = np.random.default_rng(4)
    for _ in range(7):  # an env whose first episode lasted is truncated on this step
        original.step(_actions(original, rng, 8))
    saved = {
        name: value.clone() if isinstance(value, torch.Tensor) else value.copy()
        for name, value in original.state_dict().items()
    }
    assert _host(saved["next_step.pending"]).any()
    resumed = make()
    resumed.reset(seed=5)
    resumed.load_state_dict(saved)
    for step in range(30):
        actions = _actions(original, rng, 8)
        expected, got = original.step(actions), resumed.step(actions)
        for a, b in zip(expected[:4], got[:4]):
            np.testing.assert_array_equal(_host(b), _host(a), err_msg=f"step {step}")
        if step == 0:  # the pending envs' reset step: no reward, no flags
            pending = _host(saved["next_step.pending"])
            assert not _host(got[1])[pending].any() and not _host(got[2])[pending].any()


@pytest.mark.parametrize("impl", IMPLS)
def test_load_state_dict_names_the_first_mismatch_and_copies_nothing(impl):
    env = make_env("CartPole-v1", 4, impl=impl, copy=False)
    env.reset(seed=0)
    state = env.state_dict()
    before = _host(state["obs"]).copy()
    name = "kernel.state" if impl == "native" else "state"
    wrong_dtype = {
        **state,
        name: state[name].to(torch.float32) if impl == "torch" else state[name].astype(np.float32),
    }
    with pytest.raises(
        ValueError,
        match=rf"env state '{name}' must be a .* of .*float64 "
        r"\(4, 4\), got .*float32 \(4, 4\)",
    ):
        env.load_state_dict(wrong_dtype)
    wrong_shape = {**state, "obs": state["obs"][:2]}
    with pytest.raises(ValueError, match=r"env state 'obs' must be .*\(4, 4\), got .*\(2, 4\)"):
        env.load_state_dict(wrong_shape)
    with pytest.raises(ValueError, match=rf"env state '{name}' is missing"):
        env.load_state_dict({key: value for key, value in state.items() if key != name})
    with pytest.raises(ValueError, match=r"env state 'extra' is not part of this env"):
        env.load_state_dict({**state, "extra": state["obs"]})
    np.testing.assert_array_equal(_host(env.state_dict()["obs"]), before)
