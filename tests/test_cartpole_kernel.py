"""The native CartPole kernel against Gymnasium's CartPole-v1, whole trajectories at a time."""

import gymnasium
import numpy as np
import pytest
import traced

from operant.envs import InvalidActionError, make_env

NUM_TRAJECTORIES = 1000
STEPS = 250


def _gym_envs(count):
    return [gymnasium.make("CartPole-v1").unwrapped for _ in range(count)]


def _inject(gym_env, state_column):
    gym_env.reset(seed=0)
    gym_env.state = np.array(state_column, dtype=np.float64)
    gym_env.steps_beyond_terminated = None


@pytest.mark.parametrize("initial", ["reset", "wide"])
def test_trajectories_match_gymnasium_through_autoresets(initial):
    env = make_env("CartPole-v1", NUM_TRAJECTORIES, impl="native", copy=False)
    env.reset(seed=123)
    kernel = env.kernel
    rng = np.random.default_rng(7)
    if initial == "wide":
        # Random states across the whole non-terminal region, not only reset's +-0.05 box.
        bounds = np.array([2.3, 2.0, 0.2, 2.0])[:, None]
        kernel.state[:] = rng.uniform(-bounds, bounds, size=kernel.state.shape)
        kernel.write_obs()
    gym_envs = _gym_envs(NUM_TRAJECTORIES)
    for i, gym_env in enumerate(gym_envs):
        _inject(gym_env, kernel.state[:, i])
    np.testing.assert_array_equal(env.obs, np.stack([np.float32(g.state) for g in gym_envs]))
    elapsed = np.zeros(NUM_TRAJECTORIES, dtype=np.int64)
    expected_obs = np.zeros_like(env.obs)
    expected_reward = np.zeros_like(env.rewards)
    expected_terminated = np.zeros_like(env.terminated)
    autoresets = 0
    for _ in range(STEPS):
        actions = rng.integers(0, 2, size=NUM_TRAJECTORIES)
        env.actions[:] = actions
        env.step_bound()
        elapsed += 1
        for i, gym_env in enumerate(gym_envs):
            expected_obs[i], expected_reward[i], expected_terminated[i], _, _ = gym_env.step(
                int(actions[i])
            )
        expected_truncated = elapsed >= 500
        np.testing.assert_array_equal(env.terminated, expected_terminated)
        np.testing.assert_array_equal(env.truncated, expected_truncated)
        np.testing.assert_array_equal(env.rewards, expected_reward)
        done = expected_terminated | expected_truncated
        # float32 tolerance on observations; SAME_STEP: an ended env shows its terminal
        # observation in final_obs and already holds the next episode's first one in obs.
        np.testing.assert_allclose(env.obs[~done], expected_obs[~done], rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(env.final_obs[done], expected_obs[done], rtol=1e-6, atol=1e-6)
        for i in np.flatnonzero(done):
            _inject(gym_envs[i], kernel.state[:, i])
        np.testing.assert_array_equal(env.obs[done], kernel.state[:, done].T.astype(np.float32))
        elapsed[done] = 0
        autoresets += int(done.sum())
    assert autoresets > NUM_TRAJECTORIES  # every trajectory crossed at least one reset


def test_truncation_after_500_steps():
    env = make_env("CartPole-v1", 2, impl="native", copy=False)
    env.reset(seed=0)
    env.kernel.episode_length[:] = 498
    env.kernel.episode_return[:] = 498.0
    env.kernel.state[:] = 0.0
    env.actions[:] = [0, 1]
    env.step_bound()
    assert not env.truncated.any()
    env.actions[:] = [1, 0]
    env.step_bound()
    assert env.truncated.all() and not env.terminated.any()
    stats = env.drain_episode_stats()
    assert stats.episodes == 2 and stats.length_max == 500 and stats.return_sum == 1000


def _rollout(seed, num_envs=64, steps=300):
    env = make_env("CartPole-v1", num_envs, impl="native", copy=False)
    env.reset(seed=seed)
    rng = np.random.default_rng(0)
    observations = []
    for _ in range(steps):
        env.actions[:] = rng.integers(0, 2, size=num_envs)
        env.step_bound()
        observations.append(env.obs.copy())
    return np.stack(observations)


def test_same_seed_same_trajectories_and_streams_differ():
    first, second = _rollout(5), _rollout(5)
    np.testing.assert_array_equal(first, second)
    assert not np.array_equal(first, _rollout(6))
    # Every env index has its own stream: no two envs start alike.
    initial = first[0]
    assert len(np.unique(initial, axis=0)) == initial.shape[0]


def test_no_allocation_per_step_after_warmup():
    env = make_env("CartPole-v1", 4096, impl="native", copy=False)
    env.reset(seed=1)
    env.actions[:] = np.random.default_rng(0).integers(0, 2, size=4096)
    for _ in range(100):
        env.step_bound()
    # Any per-step allocation would show up 5,000 times over; what remains is the
    # interpreter's own bookkeeping for the loop (a few dozen bytes, independent of steps).
    found = traced.windows(traced.repeat(env.kernel.step, 5000), until=(256, 1024))
    assert traced.clean(found, held_below=256, peak_below=1024), found


def test_bad_actions_are_refused_with_a_clear_message():
    env = make_env("CartPole-v1", 3, impl="native")
    env.reset(seed=0)
    with pytest.raises(InvalidActionError, match=r"shape \(3,\)"):
        env.step(np.zeros(4, dtype=np.int64))
    with pytest.raises(InvalidActionError, match="must be integers"):
        env.step(np.zeros(3, dtype=np.float32))
    with pytest.raises(InvalidActionError, match="action 2 for env 1 is outside"):
        env.step(np.array([0, 2, 1]))
    # A refused step moves nothing.
    before = env.kernel.state.copy()
    with pytest.raises(InvalidActionError):
        env.step(np.array([0, 1, -1]))
    np.testing.assert_array_equal(env.kernel.state, before)


def test_registered_with_gymnasium_make_vec():
    import operant.envs  # noqa: F401

    env = gymnasium.make_vec(
        "operant/CartPole-v1", num_envs=5, vectorization_mode="vector_entry_point"
    )
    obs, _ = env.reset(seed=3)
    assert obs.shape == (5, 4) and obs.dtype == np.float32
    assert env.single_observation_space.contains(obs[0])
    obs, rewards, terminated, truncated, info = env.step(env.action_space.sample())
    assert rewards.tolist() == [1.0] * 5 and terminated.dtype == np.bool_


def test_observations_are_shared_with_torch_without_copy():
    torch = pytest.importorskip("torch")
    env = make_env("CartPole-v1", 8, impl="native", copy=False)
    env.reset(seed=0)
    obs_t = torch.from_numpy(env.obs)
    actions_t = torch.from_numpy(env.actions)
    actions_t.fill_(1)
    env.step_bound()
    assert obs_t.data_ptr() == env.obs.ctypes.data
    np.testing.assert_array_equal(obs_t.numpy(), env.obs)
