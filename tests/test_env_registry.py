"""The env registry, its Gymnasium registration, and the errors a user can cause: unknown ids
and implementations, and actions of the wrong shape, dtype or value."""

from __future__ import annotations

import dataclasses

import gymnasium
import numpy as np
import pytest
import torch

import operant.envs  # noqa: F401  (registers operant/<id> with Gymnasium)
from operant.envs import ENVS, EnvError, InvalidActionError, make_env, resolve_impl
from operant.envs.registry import lookup

IMPLS = ["native", "torch", "reference", "auto"]
CONTINUOUS = ["MountainCarContinuous-v0", "Pendulum-v1"]
DISCRETE = ["CartPole-v1", "MountainCar-v0", "Acrobot-v1"]


def _host(value):
    return value.cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("env_id", list(ENVS))
def test_make_vec_builds_every_env_with_every_impl(env_id, impl):
    env = gymnasium.make_vec(
        f"operant/{env_id}", num_envs=5, vectorization_mode="vector_entry_point", impl=impl
    )
    expected_impl = "native" if impl == "auto" else impl
    assert env.impl == expected_impl
    gym_env = gymnasium.make(env_id)
    assert env.single_observation_space == gym_env.observation_space
    assert env.single_action_space == gym_env.action_space
    assert env.metadata["autoreset_mode"] == gymnasium.vector.AutoresetMode.SAME_STEP
    obs, info = env.reset(seed=3)
    assert tuple(obs.shape) == (5, *gym_env.observation_space.shape)
    if impl == "torch":
        assert isinstance(obs, torch.Tensor) and obs.dtype == torch.float32
    else:
        assert isinstance(obs, np.ndarray) and obs.dtype == np.float32
    env.action_space.seed(0)
    for _ in range(3):
        obs, rewards, terminated, truncated, info = env.step(env.action_space.sample())
    for row in _host(obs):
        assert gym_env.observation_space.contains(row)
    assert _host(rewards).shape == (5,) and _host(terminated).dtype == np.bool_
    assert env.spec.id == f"operant/{env_id}"
    env.close()


def test_torch_impl_through_make_vec_takes_a_device_and_returns_tensors_there():
    env = gymnasium.make_vec(
        "operant/Pendulum-v1",
        num_envs=4,
        vectorization_mode="vector_entry_point",
        impl="torch",
        device="cpu",
    )
    obs, _ = env.reset(seed=0)
    obs, rewards, terminated, truncated, info = env.step(torch.zeros(4, 1))
    assert all(t.device == torch.device("cpu") for t in (obs, rewards, terminated, truncated))
    assert set(info) == {"final_obs", "_final_obs", "final_info", "_final_info"}
    assert info["final_info"] == {} and info["_final_info"] is info["_final_obs"]
    assert rewards.dtype == torch.float32 and terminated.dtype == torch.bool


def test_auto_prefers_native_and_falls_back_to_reference(monkeypatch):
    assert resolve_impl("CartPole-v1", "auto") == "native"
    assert resolve_impl("operant/Acrobot-v1", "auto") == "native"
    # A Gymnasium id operant does not implement trains through Gymnasium.
    assert resolve_impl("Taxi-v4", "auto") == "reference"
    unbuilt = dataclasses.replace(ENVS["CartPole-v1"], native_kernel=("not_built", "Kernel"))
    monkeypatch.setitem(ENVS, "CartPole-v1", unbuilt)
    assert resolve_impl("CartPole-v1", "auto") == "reference"
    with pytest.raises(EnvError, match=r"CartPole-v1 has no native kernel in this build"):
        resolve_impl("CartPole-v1", "native")


def test_unknown_env_id_names_it_and_what_exists():
    with pytest.raises(EnvError, match=r"unknown env id 'NoSuchEnv-v0'.*CartPole-v1"):
        make_env("NoSuchEnv-v0", 2, impl="native")
    with pytest.raises(EnvError, match=r"unknown env id 'NoSuchEnv-v0'"):
        make_env("NoSuchEnv-v0", 2, impl="auto")
    # an id no one registered may be the user's own, registered by a module not named
    with pytest.raises(EnvError, match=r"name the module too, as 'package.module:NoSuchEnv-v0'"):
        make_env("NoSuchEnv-v0", 2, impl="reference")
    # and a namespace no module registered (ale_py registers ALE/...)
    with pytest.raises(EnvError, match=r"name the module too, as 'package.module:ALE/Pong-v5'"):
        make_env("ALE/Pong-v5", 2, impl="reference")
    # Gymnasium's own words point to the current version of a deprecated id.
    with pytest.raises(EnvError, match=r"Gymnasium says: .*Please use `Taxi-v4` instead\.$"):
        make_env("Taxi-v3", 2, impl="reference")
    with pytest.raises(EnvError, match=r"unknown env id 'operant/NoSuchEnv-v0'"):
        lookup("operant/NoSuchEnv-v0")


def test_a_module_of_the_users_hidden_by_the_standard_librarys_is_named(tmp_path, monkeypatch):
    # ./code.py, an env module of the user's; `code` is the standard library's, found first
    (tmp_path / "code.py").write_text("import operant\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(EnvError) as raised:
        make_env("code:Mine-v0", 2)
    said = str(raised.value)
    assert "Gymnasium says: Environment `Mine` doesn't exist; 'code' was imported from " in said
    assert said.endswith("not from ./code.py, which a module of that name earlier on sys.path "
                         "hides: rename your file")  # fmt: skip


@pytest.mark.parametrize(
    ("env_id", "kwargs"),
    [
        ("CartPole-v1", {"impl": "native"}),
        ("CartPole-v1", {"impl": "torch"}),
        ("CartPole-v1", {"impl": "reference"}),
        ("CartPole-v1", {"impl": "native", "overlap": True}),
        ("MinAtar-Breakout-v1", {"frame_stack": 4}),
        ("Grid-v0", {}),
    ],
)
def test_a_seeded_reset_seeds_the_vector_envs_own_generator(env_id, kwargs):
    # Gymnasium's VectorEnv.reset rule (wrappers and loggers draw from env.np_random): it
    # was left to the OS, np_random_seed a random 128-bit number
    env = make_env(env_id, 2, **kwargs)
    env.reset(seed=3)
    first = (env.np_random_seed, env.np_random.integers(1_000_000, size=4).tolist())
    env.reset(seed=3)
    assert first == (3, env.np_random.integers(1_000_000, size=4).tolist())
    seeded, _ = gymnasium.utils.seeding.np_random(3)  # as VectorEnv.reset seeds it
    assert first[1] == seeded.integers(1_000_000, size=4).tolist()


@pytest.mark.parametrize(
    ("make", "name"),
    [
        (lambda: make_env("CartPole-v1", 2), "NativeVectorEnv"),
        (lambda: make_env("CartPole-v1", 2, info_mode="full"), "NativeVectorEnv"),
        (lambda: make_env("MinAtar-Breakout-v1", 2, frame_stack=4), "FrameStackEnv"),
        (lambda: make_env("Grid-v0", 2), "GridVectorEnv"),
        (lambda: gymnasium.make("operant/MinAtar-Breakout-v1"), "MinAtarEnv"),
        (lambda: make_env("CartPole-v1", 2, impl="reference", workers=2), "WorkerVectorEnv"),
    ],
)
def test_an_env_of_kernel_buffers_refuses_pickling_and_copying_saying_what_to_do(make, name):
    # (Cython's refusal named the kernel's fields: "self._m,self._stepper cannot be converted
    # to a Python object for pickling")
    import copy
    import pickle

    env = make()
    try:
        for attempt in (pickle.dumps, copy.deepcopy):
            with pytest.raises(TypeError) as refused:
                attempt(env)
            said = str(refused.value)
            assert said.startswith(f"{name} cannot be pickled or copied: its state lives")
            assert "state_dict() and load_state_dict()" in said and "\n" not in said
    finally:
        env.close()
    torch_env = make_env("CartPole-v1", 2, impl="torch")  # tensors: it copies
    assert copy.deepcopy(torch_env).num_envs == 2


def test_unknown_or_unavailable_impl_names_what_was_asked():
    with pytest.raises(EnvError, match=r"unknown env impl 'cuda'; choose one of: auto, native"):
        make_env("CartPole-v1", 2, impl="cuda")
    with pytest.raises(EnvError, match=r"Taxi-v4 has no torch implementation.*reference"):
        make_env("Taxi-v4", 2, impl="torch")
    with pytest.raises(EnvError, match=r"Taxi-v4 has no native implementation"):
        make_env("Taxi-v4", 2, impl="native")
    with pytest.raises(EnvError, match=r"device='cuda' needs env.impl = \"torch\""):
        make_env("CartPole-v1", 2, impl="native", device="cuda")
    with pytest.raises(EnvError, match=r"Taxi-v4 has Discrete\(500\) observations"):
        make_env("Taxi-v4", 2, impl="reference")


def test_a_device_torch_cannot_use_is_an_env_error():
    # (torch's own AssertionError "Torch not compiled with CUDA enabled" on a CPU-only build)
    import torch

    if not torch.cuda.is_available():
        with pytest.raises(EnvError, match=r"^device='cuda' is not usable here \(.*\); use "):
            make_env("Pendulum-v1", 2, impl="torch", device="cuda")
    with pytest.raises(EnvError, match=r"^device='blah' is not usable here"):
        make_env("Acrobot-v1", 2, impl="torch", device="blah")


def _env(env_id, impl, num_envs=3):
    env = make_env(env_id, num_envs, impl=impl)
    env.reset(seed=0)
    return env


def _state(env):
    return _host(env.kernel.state if env.impl == "native" else env.state).copy()


@pytest.mark.parametrize("impl", ["native", "torch", "reference"])
@pytest.mark.parametrize("env_id", DISCRETE)
def test_bad_discrete_actions_are_refused_by_shape_dtype_and_value(env_id, impl):
    env = _env(env_id, impl)
    n = env.single_action_space.n
    with pytest.raises(InvalidActionError, match=r"shape \(3,\) \(one per env\), got \(4,\)"):
        env.step(np.zeros(4, dtype=np.int64))
    with pytest.raises(InvalidActionError, match=r"shape \(3,\) \(one per env\), got \(3, 1\)"):
        env.step(np.zeros((3, 1), dtype=np.int64))
    with pytest.raises(
        InvalidActionError, match=rf"Discrete\({n}\) must be integers, got dtype float32"
    ):
        env.step(np.zeros(3, dtype=np.float32))
    with pytest.raises(InvalidActionError, match=r"must be integers, got dtype bool"):
        env.step(np.zeros(3, dtype=np.bool_))
    if impl == "reference":
        return  # Gymnasium's own envs judge values themselves
    before = _state(env)
    with pytest.raises(
        InvalidActionError,
        match=rf"action {n} for env 1 is outside the action space Discrete\({n}\)",
    ):
        env.step(np.array([0, n, 1]))
    with pytest.raises(InvalidActionError, match=r"action -1 for env 2 is outside"):
        env.step(np.array([0, 1, -1]))
    np.testing.assert_array_equal(_state(env), before)  # a refused step moves nothing
    env.step(np.array([0, 1, n - 1]))
    assert not np.array_equal(_state(env), before)


@pytest.mark.parametrize("impl", ["native", "torch", "reference"])
@pytest.mark.parametrize("env_id", CONTINUOUS)
def test_bad_continuous_actions_are_refused_by_shape_dtype_and_value(env_id, impl):
    env = _env(env_id, impl)
    with pytest.raises(InvalidActionError, match=r"shape \(3, 1\) \(one per env\), got \(3,\)"):
        env.step(np.zeros(3, dtype=np.float32))
    with pytest.raises(InvalidActionError, match=r"must be floating point, got dtype int64"):
        env.step(np.zeros((3, 1), dtype=np.int64))
    if impl == "reference":
        return
    before = _state(env)
    with pytest.raises(InvalidActionError, match=r"action \[nan\] for env 1 is not finite"):
        env.step(np.array([[0.0], [np.nan], [0.0]], dtype=np.float32))
    with pytest.raises(InvalidActionError, match=r"action \[-inf\] for env 2 is not finite"):
        env.step(np.array([[0.0], [0.0], [-np.inf]], dtype=np.float32))
    np.testing.assert_array_equal(_state(env), before)
    # Out of range is Gymnasium's business: it clips the force (and MountainCarContinuous
    # charges the unclipped action), so the env must accept it; float64 is cast to float32.
    env.step(np.array([[5.0], [-5.0], [0.5]], dtype=np.float64))
    assert not np.array_equal(_state(env), before)


@pytest.mark.parametrize("env_id", ["Acrobot-v1", "Pendulum-v1"])
def test_torch_deferred_checks_raise_at_the_next_read_naming_the_action(env_id):
    env = make_env(env_id, 4, impl="torch", copy=False, action_checks="deferred")
    env.reset(seed=0)
    bad = (
        torch.tensor([0, 1, 7, 2])
        if env.discrete
        else torch.tensor([[0.0], [1.0], [np.nan], [0.0]])
    )
    env.step(bad)  # no host sync, so no error yet
    env.step_bound()
    assert torch.isfinite(env.state).all()  # stepped with the invalid action replaced
    expected = (
        r"action 7 for env 2 is outside"
        if env.discrete
        else r"action \[nan\] for env 2 is not finite"
    )
    with pytest.raises(InvalidActionError, match=expected + r".*since the last check"):
        env.drain_episode_stats()
    env.check_actions()  # reported once


def test_reference_impl_steps_continuous_actions():
    env = make_env("Pendulum-v1", 2, impl="reference")
    env.reset(seed=0)
    obs, rewards, terminated, truncated, _ = env.step(np.array([[1.0], [-1.0]], dtype=np.float32))
    assert obs.shape == (2, 3) and rewards.dtype == np.float32 and (rewards < 0).all()


def test_importing_the_envs_library_registers_them_without_torch():
    """Users import operant.envs from their own loops: it registers the operant/ ids with
    Gymnasium and leaves torch unimported (the torch family loads when impl="torch" is made)."""
    import subprocess
    import sys

    script = (
        "import sys, gymnasium, operant.envs; "
        "print('torch' in sys.modules, 'operant/CartPole-v1' in gymnasium.registry)"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["False", "True"]


# --- reset(seed=[...]): per-env seeds -------------------------------------------------------

SEEDED_IMPLS = ["native", "overlap", "torch", "reference"]


def _seeded_env(env_id, impl, num_envs):
    options = {"overlap": True} if impl == "overlap" else {"impl": impl}
    return make_env(env_id, num_envs, copy=True, **options)


def _trajectory(env, seed, steps=30):
    obs = [_host(env.reset(seed=seed)[0])]
    for t in range(steps):
        if isinstance(env.single_action_space, gymnasium.spaces.Discrete):
            actions = np.full(env.num_envs, t % env.single_action_space.n)
        else:
            actions = np.full((env.num_envs, 1), 0.5, dtype=np.float32)
        obs.append(_host(env.step(actions)[0]))
    return np.stack(obs)


@pytest.mark.parametrize("impl", SEEDED_IMPLS)
@pytest.mark.parametrize("env_id", list(ENVS))
def test_env_i_seeded_with_s_plays_as_env_0_of_reset_seed_s(env_id, impl):
    seeds = [11, 2**64 - 1, 5, 11]
    together = _trajectory(_seeded_env(env_id, impl, 4), seeds)
    for i, seed in enumerate(seeds):
        alone = _trajectory(_seeded_env(env_id, impl, 2), seed)
        np.testing.assert_array_equal(together[:, i], alone[:, 0], err_msg=f"env {i}")
    np.testing.assert_array_equal(together[:, 0], together[:, 3])


@pytest.mark.parametrize("impl", SEEDED_IMPLS)
def test_none_entries_keep_their_envs_streams(impl):
    env, again = (_seeded_env("Pendulum-v1", impl, 4) for _ in range(2))
    np.testing.assert_array_equal(_host(env.reset(seed=7)[0]), _host(again.reset(seed=7)[0]))
    # None entries continue those envs' streams, exactly as a reset with no seed would.
    continued = _host(env.reset()[0])
    partly = _host(again.reset(seed=[None, 3, None, None])[0])
    np.testing.assert_array_equal(partly[[0, 2, 3]], continued[[0, 2, 3]])
    assert not np.array_equal(partly[1], continued[1])


def test_an_int_seed_still_seeds_env_i_from_seed_and_i():
    """reset(seed=S) is what it was before per-env seeds: env i's stream is op_rng_seed(S, i)
    (recomputed here by operant.envs.face.seeding, which per-env seeds use)."""
    from operant.envs.face.seeding import rng_stream

    env = make_env("CartPole-v1", 4, impl="native", copy=False)
    env.reset(seed=7)
    by_int = env.obs.copy()
    env.kernel.rng_state[:] = [rng_stream(7, i) for i in range(4)]
    env.reset()
    np.testing.assert_array_equal(env.obs, by_int)


def test_a_never_seeded_env_takes_entropy_for_none_entries():
    a, b = (_seeded_env("CartPole-v1", "native", 3) for _ in range(2))
    obs_a, obs_b = (_host(env.reset(seed=[4, None, None])[0]) for env in (a, b))
    np.testing.assert_array_equal(obs_a[0], obs_b[0])
    assert not np.array_equal(obs_a[1:], obs_b[1:])


@pytest.mark.parametrize("impl", SEEDED_IMPLS)
@pytest.mark.parametrize(
    "seed, message",
    [
        ([1, 2], r"a list of seeds needs one per env: 4 entries, got 2"),
        ([1, 2, 3, 4, 5], r"4 entries, got 5"),
        ([1, "2", 3, 4], r"seed\[1\] must be an integer in \[0, 2\*\*64\) or None, got '2'"),
        ([1, 2, -1, 4], r"seed\[2\] must be"),
        ([1.5, 2, 3, 4], r"seed\[0\] must be"),
        ([True, 2, 3, 4], r"seed\[0\] must be"),
        ("123", r"seed must be an integer in \[0, 2\*\*64\), a list of 4 of them"),
        (2.0, r"seed must be an integer"),
        (2**64, r"seed must be an integer"),
    ],
)
def test_bad_seeds_are_refused_in_one_line(impl, seed, message):
    env = _seeded_env("CartPole-v1", impl, 4)
    with pytest.raises(ValueError, match=message) as refused:
        env.reset(seed=seed)
    assert "\n" not in str(refused.value)


def test_the_grid_world_is_a_vector_env_and_gymnasium_make_says_so():
    """Many agents per world: make_vec gives the vector env (agents as rows); make, which
    would need one single-agent env, is one line naming what to use."""
    envs = gymnasium.make_vec("operant/Grid-v0", num_envs=2, agents=3)
    assert envs.num_envs == 6 and type(envs).__name__ == "GridVectorEnv"
    with pytest.raises(EnvError, match=r"many agents per world.*make_vec.*GridParallelEnv"):
        gymnasium.make("operant/Grid-v0")


@pytest.mark.parametrize(
    ("env_id", "impl"),
    [("CartPole-v1", "native"), ("CartPole-v1", "torch"), ("MinAtar-Breakout-v1", "native")],
)
def test_counts_take_numpy_integers_and_refuse_what_gymnasium_refuses(env_id, impl):
    """num_envs from a numpy sweep array is a count, as Gymnasium takes it; a time limit of 0,
    2.5, "7" or True is refused in one line (native once read 0 as the default and 2.5 as 2,
    torch 2.5 as 3)."""
    env = make_env(env_id, np.int64(3), impl=impl, max_episode_steps=np.int32(5))
    assert env.num_envs == 3 and type(env.num_envs) is int
    for bad in (0, 2.5, "7", True, -1):
        with pytest.raises(
            ValueError, match=r"^max_episode_steps must be a positive integer, got "
        ):
            make_env(env_id, 2, impl=impl, max_episode_steps=bad)
    for bad in (0, 2.0, True):
        with pytest.raises(ValueError, match=r"^num_envs must be a positive integer, got "):
            make_env(env_id, bad, impl=impl)


@pytest.mark.parametrize(
    ("env_id", "impl"),
    [
        ("CartPole-v1", "native"),
        ("Pendulum-v1", "torch"),
        ("MinAtar-Breakout-v1", "native"),
        ("Grid-v0", "native"),
    ],
)
def test_reset_options_the_kernels_cannot_honour_are_refused_not_ignored(env_id, impl):
    """Gymnasium's classic-control options (low/high, x_init/y_init) were accepted and
    ignored: a run narrowed its start states and got the default ones."""
    env = make_env(env_id, 2, impl=impl)
    env.reset(seed=0, options={})  # nothing asked: nothing refused
    env.reset(seed=0, options=None)
    with pytest.raises(ValueError, match=r"^reset\(options=\{'low': -0\.01\}\): .* takes no reset"):
        env.reset(seed=0, options={"low": -0.01})


def test_the_reference_impl_honours_gymnasiums_reset_options():
    env = make_env("CartPole-v1", 64, impl="reference")
    obs, _ = env.reset(seed=0, options={"low": -0.001, "high": 0.001})
    assert np.abs(obs).max() <= 0.001


@pytest.mark.parametrize(
    ("impl", "overlap", "listed"),
    [
        ("native", False, "max_episode_steps, autoreset_mode, render_mode"),
        ("torch", False, "max_episode_steps, action_checks, autoreset_mode, render_mode"),
        ("native", True, "max_episode_steps, spin_us, autoreset_mode, render_mode"),
    ],
)
def test_an_unknown_keyword_is_one_line_listing_the_options(impl, overlap, listed):
    with pytest.raises(EnvError, match=rf"^CartPole-v1 \({impl}\) has no option 'foo'; its "):
        make_env("CartPole-v1", 2, impl=impl, overlap=overlap, foo=1)
    with pytest.raises(EnvError) as error:
        make_env("CartPole-v1", 2, impl=impl, overlap=overlap, foo=1)
    assert str(error.value).endswith(
        f'its options: {listed}; Gymnasium\'s env takes its own keywords with impl="reference"'
    )


def test_make_env_gives_its_vector_env_a_spec_as_make_vec_does():
    # None before: env.spec.id and env.spec.max_episode_steps are what Gymnasium users read
    from operant.envs import make_env

    env = make_env("CartPole-v1", 3)
    assert (env.spec.id, env.spec.max_episode_steps, env.spec.kwargs["num_envs"]) == (
        "CartPole-v1", 500, 3,
    )  # fmt: skip
    assert env.spec.reward_threshold == gymnasium.spec("CartPole-v1").reward_threshold
    assert make_env("Acrobot-v1", 2, max_episode_steps=100).spec.max_episode_steps == 100
    stacked = make_env("MinAtar-Breakout-v1", 2, frame_stack=4, info_mode="full")
    assert stacked.spec.id == "operant/MinAtar-Breakout-v1"
    assert make_env("Grid-v0", 2).spec.kwargs["num_envs"] == 2  # worlds, as make_vec counts
