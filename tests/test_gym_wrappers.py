"""Operant's envs under Gymnasium's own wrappers and checks, in both autoreset modes.

- Gymnasium's vector observation wrappers (NormalizeObservation, TransformObservation,
  FlattenObservation, DtypeObservation) refuse SAME_STEP envs; each runs over each env made
  with `autoreset_mode=NEXT_STEP`, and its values are checked.
- Gymnasium's vector RecordEpisodeStatistics, in both modes, reports the returns and lengths
  the env's own statistics (`drain_episode_stats`, `recent_returns`) hold.
- `gymnasium.utils.env_checker.check_env` on `gymnasium.make("operant/<id>")`, and the vector
  equivalents of its checks on every family's vector env.
- NEXT_STEP details: both modes play the same episodes for a seed; an ignored action may be
  anything; no allocation per step with `copy=False` (native).
"""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch
import traced
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AutoresetMode
from gymnasium.wrappers import vector as wrappers

import operant.envs
from operant.envs import ENVS, make_env

MODES = [AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP]
NUM_ENVS = 8
STEPS = 300


def _make(env_id: str, impl: str = "native", mode=AutoresetMode.NEXT_STEP, **kwargs):
    if impl == "overlap":
        impl, kwargs = "native", {**kwargs, "overlap": True}
    return gymnasium.make_vec(
        f"operant/{env_id}",
        num_envs=NUM_ENVS,
        vectorization_mode="vector_entry_point",
        impl=impl,
        autoreset_mode=mode,
        **kwargs,
    )


def _host(value) -> np.ndarray:
    return value.cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)


def _run(env, steps: int = STEPS, seed: int = 0) -> list[tuple]:
    env.action_space.seed(seed)
    results = [env.reset(seed=seed)]
    for _ in range(steps):
        results.append(env.step(env.action_space.sample()))
    return results


@pytest.mark.parametrize("impl", ["native", "reference"])
@pytest.mark.parametrize("env_id", list(ENVS))
def test_observation_wrappers_run_over_next_step_envs(env_id, impl):
    single = gymnasium.make(env_id).observation_space
    normalized = wrappers.NormalizeObservation(_make(env_id, impl))
    raw = []
    for result in _run(normalized):
        assert np.all(np.isfinite(result[0]))
    means = np.asarray(normalized.obs_rms.mean)
    assert normalized.obs_rms.count > STEPS * NUM_ENVS * 0.99
    assert means.shape == single.shape and np.any(means != 0.0)
    # The running mean is the mean of the raw observations it saw.
    base = _make(env_id, impl)
    raw = np.concatenate([_host(result[0]) for result in _run(base)])
    np.testing.assert_allclose(means, raw.mean(axis=0), rtol=1e-6, atol=1e-6)

    doubled = wrappers.TransformObservation(
        _make(env_id, impl), lambda obs: 2 * obs + 1, _make(env_id, impl).observation_space
    )
    transformed = np.concatenate([_host(result[0]) for result in _run(doubled)])
    np.testing.assert_allclose(transformed, 2 * raw + 1, rtol=1e-6)

    flat = wrappers.FlattenObservation(_make(env_id, impl))
    flattened = [result[0] for result in _run(flat)]
    assert all(obs.shape == (NUM_ENVS, int(np.prod(single.shape))) for obs in flattened)
    np.testing.assert_array_equal(np.concatenate(flattened), raw)

    as_float64 = wrappers.DtypeObservation(_make(env_id, impl), np.float64)
    cast = [result[0] for result in _run(as_float64)]
    assert all(obs.dtype == np.float64 for obs in cast)
    assert as_float64.single_observation_space.dtype == np.float64
    np.testing.assert_array_equal(np.concatenate(cast), raw.astype(np.float64))


@pytest.mark.parametrize("env_id", list(ENVS))
def test_torch_envs_take_the_wrappers_that_do_not_compute_in_numpy(env_id):
    """The torch family returns tensors: TransformObservation and DtypeObservation work on
    them; NormalizeObservation and FlattenObservation compute with numpy (docs/envs.md)."""
    env = _make(env_id, "torch")
    native = np.concatenate([_host(result[0]) for result in _run(_make(env_id, "native"))])
    cast = wrappers.DtypeObservation(env, np.float64)
    observed = np.concatenate([np.asarray(result[0]) for result in _run(cast)])
    assert observed.dtype == np.float64
    np.testing.assert_allclose(observed, native, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("env_id", list(ENVS))
def test_observation_wrappers_refuse_same_step_envs(env_id):
    with pytest.raises(ValueError, match="NEXT_STEP or DISABLED"):
        wrappers.NormalizeObservation(_make(env_id, mode=AutoresetMode.SAME_STEP))


@pytest.mark.parametrize("mode", MODES, ids=lambda mode: mode.value)
@pytest.mark.parametrize("impl", ["native", "overlap", "reference"])
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1", "MountainCar-v0"])
def test_record_episode_statistics_agrees_with_the_envs_own(env_id, impl, mode):
    """(The torch family returns tensors, which this numpy wrapper cannot add up.)"""
    env = _make(env_id, impl, mode, max_episode_steps=40)
    recorder = wrappers.RecordEpisodeStatistics(env, buffer_length=1000)
    returns, lengths = [], []
    recorder.action_space.seed(1)
    recorder.reset(seed=1)
    env.unwrapped.drain_episode_stats()
    for _ in range(STEPS):
        actions = recorder.action_space.sample()
        *_, info = recorder.step(actions)
        if "episode" in info:
            done = np.asarray(info["_episode"])
            returns.extend(np.asarray(info["episode"]["r"])[done])
            lengths.extend(np.asarray(info["episode"]["l"])[done])
    stats = env.unwrapped.drain_episode_stats()
    assert stats.episodes == len(returns) >= NUM_ENVS * (STEPS // 41)
    assert stats.length_sum == sum(lengths) and max(lengths) <= 40
    assert stats.return_sum == pytest.approx(sum(returns), rel=1e-5)
    # (The overlap env's ring keeps each half's episodes together: compare them as sets.)
    np.testing.assert_allclose(
        np.sort(env.unwrapped.recent_returns(len(returns))), np.sort(returns), rtol=1e-5
    )


@pytest.mark.parametrize("env_id", list(ENVS))
def test_check_env_passes_on_the_single_env(env_id):
    check_env(
        gymnasium.make(f"operant/{env_id}", render_mode="rgb_array").unwrapped,
        skip_render_check=False,
    )


def _check_vector_env(make) -> None:
    """The vector versions of check_env's checks: spaces, reset and step types and shapes,
    seeding determinism for reset and step, observations inside the space, metadata."""
    env = make()
    assert isinstance(env.metadata["autoreset_mode"], AutoresetMode)
    assert env.observation_space == gymnasium.vector.utils.batch_space(
        env.single_observation_space, env.num_envs
    )
    assert env.action_space == gymnasium.vector.utils.batch_space(
        env.single_action_space, env.num_envs
    )
    first = make()
    runs = [_run(candidate, steps=50, seed=5) for candidate in (env, first)]
    for ours, theirs in zip(*runs):
        for a, b in zip(ours[:-1], theirs[:-1]):
            np.testing.assert_array_equal(_host(a), _host(b))
    obs, info = runs[0][0]
    assert isinstance(info, dict) and tuple(obs.shape) == env.observation_space.shape
    for obs, rewards, terminated, truncated, info in runs[0][1:]:
        assert isinstance(info, dict)
        assert all(env.single_observation_space.contains(row) for row in _host(obs))
        assert _host(rewards).shape == (env.num_envs,) and _host(rewards).dtype.kind == "f"
        assert _host(terminated).dtype == np.bool_ and _host(truncated).dtype == np.bool_
    assert not np.array_equal(_host(make().reset(seed=6)[0]), _host(runs[0][0][0]))
    unseeded = [_host(make().reset()[0]) for _ in range(2)]
    assert not np.array_equal(*unseeded)
    env.close()


@pytest.mark.parametrize("mode", MODES, ids=lambda mode: mode.value)
@pytest.mark.parametrize("impl", ["native", "torch", "reference"])
@pytest.mark.parametrize("env_id", list(ENVS))
def test_vector_env_checks(env_id, impl, mode):
    _check_vector_env(lambda: _make(env_id, impl, mode))


@pytest.mark.parametrize("impl", ["native", "overlap", "torch"])
@pytest.mark.parametrize("env_id", list(ENVS))
def test_both_modes_play_the_same_episodes(env_id, impl):
    """NEXT_STEP holds a resetting env back for one step, so for a seed it plays the
    episodes SAME_STEP plays (each env here repeats one action, so both modes give an
    episode the same actions): its k-th episode ends k steps later, and the returns agree."""
    options = {"overlap": True} if impl == "overlap" else {"impl": impl}
    space = gymnasium.make(env_id).action_space
    rng = np.random.default_rng(4)
    if isinstance(space, gymnasium.spaces.Discrete):
        actions = rng.integers(0, space.n, size=NUM_ENVS)
    else:
        actions = rng.uniform(space.low, space.high, size=(NUM_ENVS, 1)).astype(np.float32)
    ends, returns = {}, {}
    for mode in MODES:
        env = make_env(env_id, NUM_ENVS, max_episode_steps=30, autoreset_mode=mode, **options)
        env.reset(seed=9)
        env.drain_episode_stats()
        per_env = [[] for _ in range(NUM_ENVS)]
        steps = 0
        while min(len(found) for found in per_env) < 4:
            _, _, terminated, truncated, _ = env.step(actions)
            steps += 1
            for i in np.flatnonzero(_host(terminated) | _host(truncated)):
                per_env[i].append(steps)
        ends[mode] = [found[:4] for found in per_env]
        returns[mode] = env.recent_returns(1024)
    for same_ends, next_ends in zip(ends[AutoresetMode.SAME_STEP], ends[AutoresetMode.NEXT_STEP]):
        assert [end - k for k, end in enumerate(next_ends)] == same_ends
    count = min(len(found) for found in returns.values())
    np.testing.assert_allclose(
        np.sort(returns[AutoresetMode.NEXT_STEP][:count]),
        np.sort(returns[AutoresetMode.SAME_STEP][:count]),
        rtol=1e-9,
    )


@pytest.mark.parametrize("impl", ["native", "torch"])
def test_next_step_ignores_any_action_on_a_reset_step(impl):
    env = make_env("CartPole-v1", 2, impl=impl, autoreset_mode="NextStep", max_episode_steps=3)
    env.reset(seed=0)
    for _ in range(3):
        env.step(np.array([0, 1]))
    first_obs = _host(env.obs).copy()
    obs, rewards, terminated, truncated, _ = env.step(np.array([7, 9]))  # invalid, ignored
    np.testing.assert_array_equal(_host(obs), first_obs)
    assert not _host(rewards).any() and not _host(terminated).any()
    with pytest.raises(operant.envs.InvalidActionError):
        env.step(np.array([7, 0]))


@pytest.mark.parametrize("impl", ["native", "torch"])
def test_a_refused_step_leaves_a_pending_env_as_it_was(impl):
    """Env 0 ends; the next step, refused for env 1's action, must not keep env 0's held
    rows (its length held far from the limit): its next episodes end at the limit."""
    env = make_env("CartPole-v1", 2, impl=impl, autoreset_mode="NextStep", max_episode_steps=30)
    env.reset(seed=0)
    step = 0
    while True:  # env 0 pushes right until its pole falls; env 1 balances
        _, _, terminated, truncated, _ = env.step(np.array([1, step % 2]))
        step += 1
        if _host(terminated)[0] or _host(truncated)[0]:
            break
    with pytest.raises(operant.envs.InvalidActionError):
        env.step(np.array([1, 7]))  # env 0's reset step; env 1's action refused
    ends = []
    for step in range(62):
        _, _, terminated, truncated, _ = env.step(np.array([step % 2, step % 2]))
        if _host(truncated)[0]:
            ends.append(step)
    # the reset step, then 30 steps to the limit, twice
    assert ends == [30, 61]


def test_next_step_native_step_allocates_nothing_with_copy_false():
    env = make_env(
        "CartPole-v1", 64, impl="native", copy=False, autoreset_mode="NextStep", max_episode_steps=5
    )
    env.reset(seed=0)
    actions = np.ones(64, dtype=np.int64)
    for _ in range(20):
        env.step(actions)
    grown = traced.grown(traced.repeat(lambda: env.step(actions), 1000))
    assert sum(stat.size_diff for stat in grown) < 4096, grown


def test_autoreset_mode_is_refused_in_one_line_when_unknown():
    with pytest.raises(ValueError, match=r"autoreset_mode must be .*got 'Sometimes'"):
        make_env("CartPole-v1", 2, autoreset_mode="Sometimes")
    with pytest.raises(ValueError, match=r"autoreset_mode must be"):
        make_env("CartPole-v1", 2, impl="reference", autoreset_mode=AutoresetMode.DISABLED)


def test_reference_next_step_is_gymnasiums_own():
    ours = make_env(
        "Acrobot-v1", 4, impl="reference", autoreset_mode="NextStep", max_episode_steps=20
    )
    theirs = gymnasium.make_vec(
        "Acrobot-v1",
        num_envs=4,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": AutoresetMode.NEXT_STEP},
        max_episode_steps=20,
    )
    np.testing.assert_array_equal(ours.reset(seed=3)[0], theirs.reset(seed=3)[0])
    for t in range(60):
        actions = np.full(4, t % 3)
        for a, b in zip(ours.step(actions)[:4], theirs.step(actions)[:4]):
            np.testing.assert_array_equal(a, b)
    stats = ours.drain_episode_stats()
    assert stats.episodes == 8 and stats.length_sum == 8 * 20


@pytest.mark.parametrize("mode", MODES, ids=lambda mode: mode.value)
def test_reward_and_action_wrappers_run_in_both_modes(mode):
    raw = np.concatenate([result[1] for result in _run(_make("Pendulum-v1", mode=mode))[1:]])
    doubled = wrappers.TransformReward(_make("Pendulum-v1", mode=mode), lambda r: 2 * r)
    np.testing.assert_allclose(
        np.concatenate([result[1] for result in _run(doubled)[1:]]), 2 * raw, rtol=1e-6
    )
    clipped = wrappers.ClipReward(_make("Pendulum-v1", mode=mode), -0.5, 0.5)
    np.testing.assert_allclose(
        np.concatenate([result[1] for result in _run(clipped)[1:]]),
        np.clip(raw, -0.5, 0.5),
        rtol=1e-6,
    )
    normalized = wrappers.NormalizeReward(_make("Pendulum-v1", mode=mode))
    scaled = np.concatenate([result[1] for result in _run(normalized)[1:]])
    assert np.all(np.isfinite(scaled)) and np.abs(scaled).max() < np.abs(raw).max()
    within = wrappers.ClipAction(_make("Pendulum-v1", mode=mode))
    assert all(np.all(np.isfinite(result[0])) for result in _run(within))


@pytest.mark.parametrize("env_id", list(ENVS))
def test_torch_next_step_face_never_reads_the_device_from_the_host(env_id, monkeypatch):
    env = make_env(
        env_id,
        16,
        impl="torch",
        copy=False,
        action_checks="deferred",
        autoreset_mode="NextStep",
        max_episode_steps=5,
    )
    env.reset(seed=0)
    actions = env.actions.clone()

    def refuse(*args, **kwargs):
        raise AssertionError("host sync inside a torch env step")

    for name in ("item", "tolist", "numpy", "cpu", "__bool__", "__int__", "__float__", "__index__"):
        monkeypatch.setattr(torch.Tensor, name, refuse)
    for _ in range(60):
        env.step(actions)
    monkeypatch.undo()
    stats = env.drain_episode_stats()
    assert stats.episodes == 16 * (60 // 6) and stats.length_max == 5
