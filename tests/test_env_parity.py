"""Every native and torch env against Gymnasium's own, whole trajectories at a time.

For each env, 1,000 Gymnasium envs are driven for 200 steps of random actions from random
states spread over the state space (wider than reset's), with the state Operant's env reset to
injected into Gymnasium's after every autoreset. That run is recorded once per env and both
implementations replay it: same actions, same initial states, and, because the torch envs
evaluate the native kernels' SplitMix64 streams, the same states after every autoreset, which
the replay checks too. Observations, rewards and flags must equal Gymnasium's within float32
tolerance (the native kernels other than CartPole, whose pole-angle sine and cosine are a
polynomial within 1 ulp of libm, in fact agree bit for bit).

The Gymnasium face (`step()`) is then checked in both autoreset modes, SAME_STEP and NEXT_STEP,
against Gymnasium's own SyncVectorEnv in the same mode (see the second half of this file).

Acrobot is chaotic: the 1-ulp differences between torch's sin/cos and libm's grow into a
different trajectory after a few dozen steps, so its torch replay restarts every step from
Gymnasium's state (each step is then compared from the same state, through the autoresets).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import gymnasium
import numpy as np
import pytest
import torch

from operant.envs import ENVS, make_env

NUM_TRAJECTORIES = 1000
STEPS = 200
SEED = 20240611
OBS_TOLERANCE = {"rtol": 1e-6, "atol": 1e-6}
REWARD_TOLERANCE = {"rtol": 1e-6, "atol": 1e-6}
RESYNC_EVERY_STEP = {("torch", "Acrobot-v1")}


def _wide_states(env_id: str, rng: np.random.Generator, count: int) -> np.ndarray:
    """Initial states over (most of) each env's state space, shaped (state_dim, count)."""
    pi = math.pi
    low, high = {
        "CartPole-v1": ([-2.3, -2.0, -0.2, -2.0], [2.3, 2.0, 0.2, 2.0]),
        # Up to past the goal, so some episodes terminate on their first step.
        "MountainCar-v0": ([-1.2, -0.07], [0.55, 0.07]),
        "MountainCarContinuous-v0": ([-1.2, -0.07], [0.5, 0.07]),
        # Several turns either way, through angle_normalize's modulo.
        "Pendulum-v1": ([-3 * pi, -8.0], [3 * pi, 8.0]),
        "Acrobot-v1": ([-pi, -pi, -4 * pi, -9 * pi], [pi, pi, 4 * pi, 9 * pi]),
    }[env_id]
    return rng.uniform(np.array(low)[:, None], np.array(high)[:, None], size=(len(low), count))


def _random_actions(space, rng: np.random.Generator, count: int) -> np.ndarray:
    if isinstance(space, gymnasium.spaces.Discrete):
        return rng.integers(0, space.n, size=count)
    # Half again past the bounds (Gymnasium clips the force, and charges the raw action), and
    # some exactly on them.
    high = float(space.high[0])
    actions = rng.uniform(-1.5 * high, 1.5 * high, size=(count, *space.shape))
    edge = rng.random(actions.shape) < 0.05
    actions[edge] = np.sign(actions[edge]) * high
    return actions.astype(np.float32)


@dataclass
class Recording:
    """Gymnasium's trajectories, one row per step."""

    initial_state: np.ndarray  # (state_dim, N) injected before the first step
    actions: list  # per step, what every env was given
    obs: np.ndarray  # (steps, N, obs_dim) after the step (terminal obs where done)
    rewards: np.ndarray  # (steps, N)
    terminated: np.ndarray  # (steps, N)
    truncated: np.ndarray  # (steps, N)
    next_state: np.ndarray  # (steps, state_dim, N): the state after each step's autoreset
    autoresets: int


def _inject(gym_env, state_column: np.ndarray) -> None:
    # A float64 array, as each env's own reset stores (Acrobot's reset values are float32
    # numbers; the kernels keep them so, and NumPy promotes them to float64 on its first step).
    gym_env.state = np.array(state_column, dtype=np.float64)
    if hasattr(gym_env, "steps_beyond_terminated"):
        gym_env.steps_beyond_terminated = None


@functools.cache
def _record(env_id: str) -> Recording:
    """Run Gymnasium's envs, taking reset states from a native env with the same seed."""
    driver = make_env(env_id, NUM_TRAJECTORIES, impl="native", copy=False)
    driver.reset(seed=SEED)
    rng = np.random.default_rng(SEED)
    initial_state = _wide_states(env_id, rng, NUM_TRAJECTORIES)
    driver.kernel.state[:] = initial_state
    driver.kernel.write_obs()
    gym_envs = [gymnasium.make(env_id).unwrapped for _ in range(NUM_TRAJECTORIES)]
    for gym_env, column in zip(gym_envs, initial_state.T):
        gym_env.reset(seed=0)
        _inject(gym_env, column)
    discrete = driver.discrete
    steps = [gym_env.step for gym_env in gym_envs]
    elapsed = np.zeros(NUM_TRAJECTORIES, dtype=np.int64)
    actions, obs, rewards, terminated, truncated, next_state = [], [], [], [], [], []
    autoresets = 0
    for _ in range(STEPS):
        step_actions = _random_actions(driver.single_action_space, rng, NUM_TRAJECTORIES)
        actions.append(step_actions)
        driver.actions[:] = step_actions
        driver.step_bound()
        per_env = step_actions.tolist() if discrete else step_actions
        results = [step(action) for step, action in zip(steps, per_env)]
        elapsed += 1
        obs.append(np.stack([result[0] for result in results]).astype(np.float32))
        rewards.append(np.array([result[1] for result in results], dtype=np.float32))
        step_terminated = np.array([result[2] for result in results])
        step_truncated = elapsed >= driver.max_episode_steps
        terminated.append(step_terminated)
        truncated.append(step_truncated)
        done = step_terminated | step_truncated
        # The reset state where an env ended; elsewhere Gymnasium's own, where a replay restarts
        # from it (reading 1,000 states a step costs a second, so only there).
        state = driver.kernel.state.copy()
        if any(env_id == resynced for _, resynced in RESYNC_EVERY_STEP):
            gym_state = np.stack(
                [np.asarray(gym_env.state, dtype=np.float64) for gym_env in gym_envs], axis=1
            )
            state[:, ~done] = gym_state[:, ~done]
        next_state.append(state)
        for i in np.flatnonzero(done):
            _inject(gym_envs[i], driver.kernel.state[:, i])
        elapsed[done] = 0
        autoresets += int(done.sum())
    return Recording(
        initial_state,
        actions,
        np.stack(obs),
        np.stack(rewards),
        np.stack(terminated),
        np.stack(truncated),
        np.stack(next_state),
        autoresets,
    )


def _outputs(env) -> tuple[np.ndarray, ...]:
    def host(value):
        return value.cpu().numpy() if isinstance(value, torch.Tensor) else value

    state = env.kernel.state if env.impl == "native" else env.state
    return (
        host(env.obs),
        host(env.final_obs),
        host(env.rewards),
        host(env.terminated),
        host(env.truncated),
        host(state),
    )


@pytest.mark.parametrize("impl", ["native", "torch"])
@pytest.mark.parametrize("env_id", list(ENVS))
def test_trajectories_match_gymnasium_through_autoresets(env_id, impl):
    recording = _record(env_id)
    env = make_env(env_id, NUM_TRAJECTORIES, impl=impl, copy=False)
    env.reset(seed=SEED)
    state = env.kernel.state if impl == "native" else env.state
    state[:] = (
        torch.from_numpy(recording.initial_state) if impl == "torch" else recording.initial_state
    )
    if impl == "native":
        env.kernel.write_obs()
    resync = (impl, env_id) in RESYNC_EVERY_STEP
    for t in range(STEPS):
        actions = recording.actions[t]
        env.actions[:] = torch.from_numpy(actions) if impl == "torch" else actions
        env.step_bound()
        obs, final_obs, rewards, terminated, truncated, state_now = _outputs(env)
        np.testing.assert_array_equal(terminated, recording.terminated[t], err_msg=f"step {t}")
        np.testing.assert_array_equal(truncated, recording.truncated[t], err_msg=f"step {t}")
        np.testing.assert_allclose(
            rewards, recording.rewards[t], **REWARD_TOLERANCE, err_msg=f"step {t}"
        )
        done = recording.terminated[t] | recording.truncated[t]
        # SAME_STEP: an env that ended shows its terminal observation in final_obs and already
        # holds its next episode's first one in obs.
        np.testing.assert_allclose(
            obs[~done], recording.obs[t][~done], **OBS_TOLERANCE, err_msg=f"step {t}"
        )
        np.testing.assert_allclose(
            final_obs[done], recording.obs[t][done], **OBS_TOLERANCE, err_msg=f"step {t}"
        )
        # The autoreset drew exactly the state Gymnasium was given.
        np.testing.assert_array_equal(
            state_now[:, done], recording.next_state[t][:, done], err_msg=f"step {t}"
        )
        if resync:
            env.state.copy_(torch.from_numpy(recording.next_state[t]))
            env.obs.copy_(env._observe(env.state))
    assert recording.autoresets >= 200  # MountainCarContinuous, the rarest, has ~230


@pytest.mark.parametrize("env_id", list(ENVS))
def test_native_and_torch_agree(env_id):
    """Same seed, same actions: the two implementations reset to bit-identical states and
    step to the same observations, rewards and flags."""
    num_envs, steps = 1000, 200
    native = make_env(env_id, num_envs, impl="native", copy=False)
    batched = make_env(env_id, num_envs, impl="torch", copy=False)
    native.reset(seed=7)
    batched.reset(seed=7)
    np.testing.assert_array_equal(batched.state.numpy(), native.kernel.state)
    np.testing.assert_array_equal(batched.obs.numpy(), native.obs)
    rng = np.random.default_rng(3)
    episodes = 0
    for t in range(steps):
        actions = _random_actions(native.single_action_space, rng, num_envs)
        native.actions[:] = actions
        batched.actions.copy_(torch.from_numpy(actions))
        native.step_bound()
        batched.step_bound()
        np.testing.assert_array_equal(batched.terminated.numpy(), native.terminated)
        np.testing.assert_array_equal(batched.truncated.numpy(), native.truncated)
        np.testing.assert_allclose(batched.rewards.numpy(), native.rewards, **REWARD_TOLERANCE)
        np.testing.assert_allclose(
            batched.obs.numpy(), native.obs, **OBS_TOLERANCE, err_msg=f"step {t}"
        )
        done = native.terminated | native.truncated
        np.testing.assert_allclose(
            batched.final_obs.numpy()[done], native.final_obs[done], **OBS_TOLERANCE
        )
        np.testing.assert_array_equal(batched.state.numpy()[:, done], native.kernel.state[:, done])
        if ("torch", env_id) in RESYNC_EVERY_STEP:
            batched.state.copy_(torch.from_numpy(native.kernel.state))
        episodes += int(done.sum())
    native_stats, torch_stats = native.drain_episode_stats(), batched.drain_episode_stats()
    assert torch_stats.episodes == native_stats.episodes == episodes
    assert torch_stats.length_sum == native_stats.length_sum
    assert torch_stats.return_sum == pytest.approx(native_stats.return_sum, rel=1e-9)
    np.testing.assert_allclose(batched.recent_returns(100), native.recent_returns(100), rtol=1e-9)


def test_cartpole_angles_past_the_polynomial_range_step_with_libm():
    """The CartPole kernel's vectorised sine/cosine covers |theta| <= 0.3125; larger angles
    (reachable only by injecting a state) take libm's path, which matches Gymnasium exactly."""
    env = make_env("CartPole-v1", 64, impl="native", copy=False)
    env.reset(seed=0)
    rng = np.random.default_rng(1)
    states = rng.uniform([-2.0, -2.0, -3.0, -3.0], [2.0, 2.0, 3.0, 3.0], size=(64, 4)).T
    states[2, :32] = rng.uniform(0.3125, 3.0, size=32) * rng.choice([-1.0, 1.0], size=32)
    env.kernel.state[:] = states
    actions = rng.integers(0, 2, size=64)
    env.actions[:] = actions
    env.step_bound()
    for i in range(64):
        gym_env = gymnasium.make("CartPole-v1").unwrapped
        gym_env.reset(seed=0)
        gym_env.state = states[:, i].copy()
        obs, reward, terminated, _, _ = gym_env.step(int(actions[i]))
        assert env.terminated[i] == terminated
        observed = env.final_obs[i] if terminated else env.obs[i]
        np.testing.assert_array_equal(observed, obs)


# --- The Gymnasium face, in both autoreset modes, against Gymnasium's own vector env ---------

FACE_ENVS = 128
FACE_STEPS = 300
MODES = [gymnasium.vector.AutoresetMode.SAME_STEP, gymnasium.vector.AutoresetMode.NEXT_STEP]


def _observe(gym_env) -> np.ndarray:
    """A Gymnasium env's observation of its current state (what its reset returns)."""
    for method in ("_get_obs", "_get_ob"):
        if hasattr(gym_env, method):
            return np.asarray(getattr(gym_env, method)(), dtype=np.float32)
    return np.array(gym_env.state, dtype=np.float32)


class _ResetsTo(gymnasium.Wrapper):
    """A Gymnasium env whose resets draw as usual, then take the state `next_state` (the one
    Operant's env reset to), so both sides start every episode from the same state."""

    next_state: np.ndarray | None = None

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        if self.next_state is not None:
            _inject(self.env.unwrapped, self.next_state)
            obs = _observe(self.env.unwrapped)
        return obs, info


def _core_state(env) -> np.ndarray:
    if env.impl == "torch":
        return env.state.numpy()
    return np.concatenate([kernel.state for kernel in env.kernels], axis=1)


def _set_core_state(env, state: np.ndarray, rows: np.ndarray) -> None:
    """Put `state` into the rows `rows` of the core (torch Acrobot's per-step resync)."""
    env.state[:, torch.from_numpy(rows)] = torch.from_numpy(state[:, rows])
    env.obs.copy_(env._observe(env.state))


@pytest.mark.parametrize("mode", MODES, ids=lambda mode: mode.value)
@pytest.mark.parametrize("impl", ["native", "overlap", "torch"])
@pytest.mark.parametrize("env_id", list(ENVS))
def test_step_matches_gymnasium_vector_env_in_each_autoreset_mode(env_id, impl, mode):
    """`step()` against Gymnasium's SyncVectorEnv in the same autoreset mode, whole
    trajectories: the same wide initial states, the same random actions, every episode
    starting from the state Operant's env reset to (injected into Gymnasium's at its reset).
    Observations, rewards, flags, `info["final_obs"]` (SAME_STEP) and the NEXT_STEP reset
    steps (reward 0, no flags, the action ignored) must all agree."""
    options = {"overlap": True} if impl == "overlap" else {"impl": impl}
    env = make_env(env_id, FACE_ENVS, copy=True, autoreset_mode=mode, **options)
    assert env.metadata["autoreset_mode"] == mode
    wrappers = [
        _ResetsTo(gymnasium.make(env_id, disable_env_checker=True)) for _ in range(FACE_ENVS)
    ]
    gym_vec = gymnasium.vector.SyncVectorEnv([lambda w=w: w for w in wrappers], autoreset_mode=mode)
    rng = np.random.default_rng(SEED + 1)
    env.reset(seed=SEED)
    gym_vec.reset(seed=SEED)
    initial = _wide_states(env_id, rng, FACE_ENVS)
    core = env.state if impl == "torch" else None
    if impl == "torch":
        core.copy_(torch.from_numpy(initial))
        env.obs.copy_(env._observe(env.state))
    else:
        for (lo, hi), kernel in zip(env._kernel_rows(), env.kernels):
            kernel.state[:] = initial[:, lo:hi]
            kernel.write_obs()
    for wrapper, column in zip(wrappers, initial.T):
        _inject(wrapper.unwrapped, column)
    resync = (impl, env_id) in RESYNC_EVERY_STEP
    resets = 0
    for t in range(FACE_STEPS):
        actions = _random_actions(env.single_action_space, rng, FACE_ENVS)
        obs, rewards, terminated, truncated, info = env.step(actions)
        obs, rewards, terminated, truncated = (
            np.asarray(x) for x in (obs, rewards, terminated, truncated)
        )
        ended = terminated | truncated
        state = _core_state(env)
        for i in np.flatnonzero(ended):
            wrappers[i].next_state = state[:, i].copy()
        want = gym_vec.step(actions)
        message = f"{env_id} {impl} {mode.value} step {t}"
        np.testing.assert_array_equal(terminated, want[2], err_msg=message)
        np.testing.assert_array_equal(truncated, want[3], err_msg=message)
        np.testing.assert_allclose(rewards, want[1], **REWARD_TOLERANCE, err_msg=message)
        np.testing.assert_allclose(obs, want[0], **OBS_TOLERANCE, err_msg=message)
        if mode == gymnasium.vector.AutoresetMode.SAME_STEP and ended.any():
            np.testing.assert_array_equal(np.asarray(info["_final_obs"]), want[4]["_final_obs"])
            np.testing.assert_allclose(
                np.asarray(info["final_obs"])[ended],
                np.stack(want[4]["final_obs"][ended]),
                **OBS_TOLERANCE,
                err_msg=message,
            )
        if resync:
            gym_state = np.stack(
                [np.asarray(w.unwrapped.state, dtype=np.float64) for w in wrappers], axis=1
            )
            waiting = (
                ended if mode == gymnasium.vector.AutoresetMode.NEXT_STEP else np.zeros_like(ended)
            )
            _set_core_state(env, gym_state, np.flatnonzero(~waiting))
        resets += int(ended.sum())
    assert resets >= 20
    env.close()
