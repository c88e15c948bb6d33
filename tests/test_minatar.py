"""MinAtar's games as native kernels (operant.cext.minatar, operant.envs.minatar.vector).

Parity: every env of a kernel is checked at every step against the `minatar` package's game
object with our state injected (operant.envs.minatar.parity), spawns included (MinAtar's
RandomState replays our stream); a MinAtar whose rule differs is caught. These skip without the
`minatar` extra. The rest needs only the kernel: the face's buffers and specs, seeding, explicit
state, sticky actions' rate, the reset draws' distributions, refusals, no allocation per step.
"""

from __future__ import annotations

import os
import subprocess
import sys

import gymnasium
import numpy as np
import pytest
import traced

from operant.cext.minatar import GAMES
from operant.envs import EnvError, InvalidActionError, make_env
from operant.envs.contract import BatchEnv
from operant.envs.minatar.vector import GAME_IDS, MinAtarVectorEnv

IDS = sorted(GAME_IDS)


def _has_minatar() -> bool:
    try:
        import minatar  # noqa: F401
    except ImportError:
        return False
    return True


needs_minatar = pytest.mark.skipif(not _has_minatar(), reason="needs the minatar extra")


@needs_minatar
@pytest.mark.parametrize("game", list(GAMES))
def test_every_step_matches_minatar_including_spawns(game):
    from operant.envs.minatar.parity import check_game

    report = check_game(game, num_envs=16, steps=40, seed=3, scramble_every=8)
    assert report.states == 640
    assert report.mismatches == 0, report.first
    # the check saw episode ends, and steps that drew: SpaceInvaders never draws, Breakout
    # only to reset, Freeway to reset and spawn, Asterix and Seaquest to spawn
    assert report.terminal > 0
    if game == "space_invaders":
        assert report.drawing == 0
    elif game == "breakout":
        assert report.drawing == report.terminal
    else:
        assert report.drawing > 20


def _replay(env, seed: int, actions) -> list:
    env.reset(seed=seed)
    return [np.array(env.step(action)[0], copy=True) for action in actions]


@pytest.mark.parametrize("impl", ["native", pytest.param("reference", marks=needs_minatar)])
def test_a_seeded_reset_plays_the_same_whatever_came_before(impl):
    # (MinAtar's sticky "previous action" outlived a re-seed: Breakout's reset(seed=s) played
    # differently after some play for 4 seeds in 20)
    rng = np.random.default_rng(0)
    for seed in range(20):
        actions = rng.integers(0, 3, (60, 2))
        fresh = _replay(make_env("MinAtar-Breakout-v1", 2, impl=impl), seed, actions)
        played = make_env("MinAtar-Breakout-v1", 2, impl=impl)
        _replay(played, seed + 100, rng.integers(0, 3, (37, 2)))
        assert all(map(np.array_equal, _replay(played, seed, actions), fresh)), seed
        # a seed list re-seeds its listed envs as new ones, the others play on
        _replay(played, seed + 100, rng.integers(0, 3, (37, 2)))
        again = _replay(played, [seed, None], actions)
        assert all(np.array_equal(a[0], b[0]) for a, b in zip(again, fresh)), seed
    single = gymnasium.make("operant/MinAtar-Breakout-v1")
    first = [single.reset(seed=5)[0]] + [single.step(a)[0] for a in (1, 1, 2, 0, 1)]
    second = [single.reset(seed=5)[0]] + [single.step(a)[0] for a in (1, 1, 2, 0, 1)]
    assert all(map(np.array_equal, first, second))


@pytest.mark.parametrize("impl", ["native", pytest.param("reference", marks=needs_minatar)])
def test_the_vector_envs_draw_frames_at_a_render_scale(impl):
    # (only the single env took render_scale: a vector RecordVideo wrote 10 x 10 pixel videos)
    from operant.envs.minatar.env import rgb_frame

    env = make_env("MinAtar-Breakout-v1", 2, impl=impl, render_mode="rgb_array", render_scale=8)
    obs, _ = env.reset(seed=0)
    frames = env.render()
    assert [frame.shape for frame in frames] == [(80, 80, 3)] * 2
    assert np.array_equal(frames[1], rgb_frame(obs[1], 8))
    assert np.array_equal(frames[1][::8, ::8], rgb_frame(obs[1]))
    with pytest.raises(EnvError, match=r"^render_scale must be a positive integer, got 0$"):
        make_env("MinAtar-Breakout-v1", 2, impl=impl, render_scale=0)


def test_render_without_a_mode_warns_as_gymnasiums_envs_do():
    env = gymnasium.make("operant/MinAtar-Breakout-v1")
    env.reset(seed=0)
    with pytest.warns(UserWarning, match="without specifying any render mode"):
        assert env.render() is None


@needs_minatar
def test_sticky_actions_and_no_ramping_match_minatar():
    from operant.envs.minatar.parity import check_game

    for game in GAMES:
        report = check_game(game, 8, 30, seed=5, sticky_action_prob=0.3)
        assert (report.states, report.mismatches) == (240, 0), report.first
        report = check_game(game, 8, 30, seed=6, difficulty_ramping=False)
        assert (report.states, report.mismatches) == (240, 0), report.first


@needs_minatar
def test_the_check_catches_a_rule_that_differs(monkeypatch):
    """A test double: MinAtar with one constant changed must show mismatches."""
    import minatar.environments.freeway as freeway
    import minatar.environments.seaquest as seaquest
    import minatar.environments.space_invaders as space_invaders

    from operant.envs.minatar.parity import check_game

    monkeypatch.setattr(space_invaders, "shot_cool_down", 4)
    monkeypatch.setattr(freeway, "player_speed", 2)
    monkeypatch.setattr(seaquest, "enemy_shot_interval", 9)
    assert check_game("space_invaders", 8, 40, seed=1).mismatches > 0
    assert check_game("freeway", 8, 40, seed=1).mismatches > 0
    assert check_game("seaquest", 8, 40, seed=1).mismatches > 0


@needs_minatar
def test_reference_impl_is_the_minatar_package():
    env = make_env("MinAtar-Asterix-v1", 4, impl="reference")
    assert env.impl == "reference"
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4, 4, 10, 10) and obs.dtype == np.uint8
    assert obs[:, 0].sum() == 4  # one player each, at (5, 5)
    assert obs[:, 0, 5, 5].all()
    for _ in range(200):
        env.step(np.zeros(4, np.int64))
    stats = env.drain_episode_stats()
    assert stats.episodes > 0 and stats.length_min > 0


def test_reference_without_the_extra_is_one_line(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_minatar(name, *args, **kwargs):
        if name == "minatar" or name.startswith("minatar."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_minatar)
    with pytest.raises(EnvError, match=r'pip install "operant-rl\[minatar\]"'):
        make_env("MinAtar-Breakout-v1", 2, impl="reference")


def test_the_parity_command_without_the_extra_is_one_line(tmp_path):
    # the documented `python -m operant.envs.minatar.parity` was a traceback, exit 1
    stub = tmp_path / "minatar"
    stub.mkdir()
    (stub / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'minatar'\", name='minatar')\n"
    )
    environ = {**os.environ, "PYTHONPATH": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-m", "operant.envs.minatar.parity", "--envs", "2", "--steps", "2"],
        capture_output=True, text=True, timeout=120, env=environ,
    )  # fmt: skip
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.endswith('which is not installed: pip install "operant-rl[minatar]"')


@pytest.mark.parametrize("env_id", IDS)
def test_face_declares_channels_first_uint8_and_keeps_its_buffers(env_id):
    env = gymnasium.make_vec(
        f"operant/{env_id}", num_envs=5, vectorization_mode="vector_entry_point"
    )
    assert isinstance(env, MinAtarVectorEnv) and isinstance(env, BatchEnv)
    layout = GAMES[GAME_IDS[env_id]]
    channels = len(layout["channels"])
    assert env.obs_spec.shape == (channels, 10, 10) and env.obs_spec.dtype == np.uint8
    assert env.single_action_space.n == len(layout["minimal_actions"])
    pointer = env.obs.ctypes.data
    obs, _ = env.reset(seed=7)
    assert obs.shape == (5, channels, 10, 10) and set(np.unique(obs)) <= {0, 1}
    rng = np.random.default_rng(0)
    for _ in range(300):
        obs, rewards, terminated, truncated, info = env.step(rng.integers(0, 3, 5))
        for i in np.flatnonzero(terminated):
            assert info["_final_obs"][i] and info["final_obs"][i].shape == (channels, 10, 10)
    assert env.obs.ctypes.data == pointer
    assert not truncated.any()  # no time limit unless asked
    assert make_env(env_id, 2, full_action_set=True).single_action_space.n == 6


@pytest.mark.parametrize("env_id", IDS)
def test_seeded_runs_repeat_and_a_state_dict_resumes_them(env_id):
    def run(env, steps, seed=0):
        rng = np.random.default_rng(seed)
        frames = []
        for _ in range(steps):
            env.step(rng.integers(0, env.single_action_space.n, env.num_envs))
            frames.append((env.obs.copy(), env.rewards.copy(), env.terminated.copy()))
        return frames

    first, second = make_env(env_id, 6), make_env(env_id, 6)
    first.reset(seed=11)
    second.reset(seed=11)
    run(first, 100)
    run(second, 100)
    saved = {name: np.array(value, copy=True) for name, value in first.state_dict().items()}
    expected = run(first, 150, seed=1)
    resumed = make_env(env_id, 6)
    resumed.load_state_dict(saved)
    got = run(resumed, 150, seed=1)
    for (a, b, c), (x, y, z) in zip(expected, got):
        assert np.array_equal(a, x) and np.array_equal(b, y) and np.array_equal(c, z)
    # env i seeded alone with s plays as env 0 of a batch seeded with s
    alone = make_env(env_id, 1)
    alone.reset(seed=[99])
    batch = make_env(env_id, 3)
    batch.reset(seed=[5, 99, 6])
    for _ in range(50):
        alone.step(np.array([1]))
        batch.step(np.array([0, 1, 2]))
        assert np.array_equal(alone.obs[0], batch.obs[1])


def test_sticky_actions_repeat_the_last_action_at_their_rate():
    env = make_env("MinAtar-Breakout-v1", 256, sticky_action_prob=0.25)
    env.reset(seed=0)
    last = env.kernel.scalars[0]  # the previous effective action (MinAtar's full codes)
    kept = total = 0
    for step in range(200):
        wanted = np.full(256, 1 + step % 2)  # alternate left (code 1) and right (code 3)
        before = last.copy()
        env.step(wanted)
        codes = np.array(env.action_set)[wanted]
        kept += int(((last == before) & (codes != before)).sum())
        total += int((codes != before).sum())
    assert abs(kept / total - 0.25) < 0.02
    env = make_env("MinAtar-Breakout-v1", 8, sticky_action_prob=0.0)
    env.reset(seed=0)
    env.step(np.full(8, 2))
    assert (env.kernel.scalars[0] == 3).all()


def test_reset_draws_have_minatar_distributions():
    breakout = make_env("MinAtar-Breakout-v1", 4000)
    breakout.reset(seed=1)
    ball_x = breakout.kernel.scalars[GAMES["breakout"]["scalars"].index("ball_x")]
    assert set(ball_x.tolist()) == {0, 9} and abs((ball_x == 9).mean() - 0.5) < 0.03
    freeway = make_env("MinAtar-Freeway-v1", 2000)
    freeway.reset(seed=1)
    speed = freeway.kernel.slots[2]
    assert set(np.abs(speed).ravel().tolist()) == {1, 2, 3, 4, 5}
    assert abs((speed > 0).mean() - 0.5) < 0.02
    asterix = make_env("MinAtar-Asterix-v1", 2000, sticky_action_prob=0.0)
    asterix.reset(seed=1)
    for _ in range(11):  # the first spawn comes on step 11
        asterix.step(np.zeros(2000, np.int64))
    active, lr, gold = asterix.kernel.slots[0], asterix.kernel.slots[2], asterix.kernel.slots[3]
    assert (active.sum(axis=1) == 1).all()
    assert abs(lr[active == 1].mean() - 0.5) < 0.04
    assert abs(gold[active == 1].mean() - 1 / 3) < 0.04
    assert abs(active.mean(axis=0) - 1 / 8).max() < 0.03


def test_bad_input_is_refused_in_one_line():
    env = make_env("MinAtar-Freeway-v1", 3)
    env.reset(seed=0)
    with pytest.raises(InvalidActionError, match=r"action 3 for env 1 is outside"):
        env.step(np.array([0, 3, 0]))
    with pytest.raises(EnvError, match="sticky_action_prob must be in"):
        make_env("MinAtar-Freeway-v1", 3, options={"sticky_action_prob": 2})
    # (a string "false" was truthy: ramping stayed on, the full action set came in)
    for option, value in (("full_action_set", "false"), ("difficulty_ramping", "yes")):
        with pytest.raises(EnvError, match=rf"{option} must be true or false, got '{value}'$"):
            make_env("MinAtar-Freeway-v1", 3, options={option: value})
    with pytest.raises(EnvError, match=r"sticky_action_prob must be in \[0, 1\], got '0.5'"):
        make_env("MinAtar-Freeway-v1", 3, options={"sticky_action_prob": "0.5"})
    with pytest.raises(EnvError, match="no torch implementation"):
        make_env("MinAtar-Freeway-v1", 3, impl="torch")
    with pytest.raises(EnvError, match=r"unknown env id 'MinAtar-Pong-v1'.*MinAtar-Breakout-v1"):
        make_env("MinAtar-Pong-v1", 3)
    with pytest.raises(
        EnvError, match=r"MinAtar-Freeway-v1 has no option 'bogus'; options: sticky_action_prob"
    ):
        make_env("MinAtar-Freeway-v1", 3, options={"bogus": 1})
    with pytest.raises(EnvError, match=r"device='cuda': MinAtar-Freeway-v1 runs on the CPU"):
        make_env("MinAtar-Freeway-v1", 3, device="cuda")
    assert make_env("MinAtar-Freeway-v1", 3, device="cpu").num_envs == 3


def test_truncation_at_max_episode_steps():
    env = make_env("MinAtar-SpaceInvaders-v1", 4, max_episode_steps=7, sticky_action_prob=0)
    env.reset(seed=0)
    for step in range(1, 15):
        env.step(np.zeros(4, np.int64))
        assert env.truncated.all() == (step % 7 == 0)


@pytest.mark.parametrize("env_id", IDS)
def test_no_allocation_per_step(env_id):
    env = make_env(env_id, 64, copy=False)
    env.reset(seed=0)
    kernel = env.kernel
    for _ in range(10):
        kernel.step()
    found = traced.windows(traced.repeat(kernel.step, 1000), until=(256, 1024))
    assert traced.clean(found, held_below=256, peak_below=1024), found


@needs_minatar
def test_bench_validate_checks_against_minatar_and_exits_2_on_a_mismatch(
    monkeypatch, tmp_path, capsys
):
    import json

    import minatar.environments.breakout as breakout

    from operant.trainer.bench import cli as bench_module

    out = tmp_path / "minatar.json"
    argv = ["env_only", "--env", "MinAtar-Breakout-v1", "--num-envs", "8", "--rounds", "2"]
    argv += ["--round-seconds", "0.02", "--max-cv", "10", "--output", str(out)]
    argv += ["--validate", "--validate-steps", "30"]
    assert bench_module.main(argv) == 0
    (report,) = json.loads(out.read_text())["validation"]
    assert report["ok"] and report["compared"] == 240 and report["mismatches"] == 0
    capsys.readouterr()

    class Misnumbered(breakout.Env):
        def reset(self):
            super().reset()
            self.pos = 5  # the paddle starts one cell off

    monkeypatch.setattr(breakout, "Env", Misnumbered)
    assert bench_module.main(argv) == bench_module.EXIT_PARITY == 2
    record = json.loads(out.read_text())
    assert record["validation"][0]["mismatches"] > 0 and "results" not in record
    assert capsys.readouterr().err.strip().splitlines() == [
        "operant bench: --validate: the breakout kernel disagrees with the minatar package; "
        "nothing was measured"
    ]


@pytest.mark.parametrize("env_id", IDS)
def test_the_observation_kept_by_difference_is_the_one_drawn_whole(env_id):
    """A step writes only the cells that change (minatar.h); after any number of steps,
    episode ends and truncations, the rows are what clearing and redrawing them gives."""
    env = make_env(env_id, 32, max_episode_steps=90)
    env.reset(seed=5)
    rng = np.random.default_rng(5)
    ended = 0
    for step in range(300):
        env.step(rng.integers(0, env.single_action_space.n, env.num_envs))
        ended += int((env.terminated | env.truncated).sum())
        if step % 15 == 14:
            kept = env.obs.copy()
            env.kernel.write_obs()
            assert np.array_equal(kept, env.obs), f"step {step}"
    assert ended >= 32


def test_a_loaded_state_out_of_range_is_clamped_not_indexed():
    """Positions and list lengths index memory: a corrupt state must not reach outside it."""
    invaders = make_env("MinAtar-SpaceInvaders-v1", 2, sticky_action_prob=0)
    invaders.reset(seed=0)
    invaders.kernel.scalars[GAMES["space_invaders"]["scalars"].index("pos")] = [77, -3]
    invaders.step(np.zeros(2, np.int64))
    assert invaders.kernel.scalars[1].tolist() == [9, 0]
    seaquest = make_env("MinAtar-Seaquest-v1", 2, sticky_action_prob=0)
    seaquest.reset(seed=0)
    lengths = slice(GAMES["seaquest"]["scalars"].index("n_f_bullets"), None)
    seaquest.kernel.scalars[lengths] = [[1000], [-5], [1000], [-5], [1000]]
    seaquest.step(np.zeros(2, np.int64))
    assert seaquest.kernel.scalars[lengths].min() >= 0
    assert seaquest.kernel.scalars[lengths].max() <= GAMES["seaquest"]["slots"]
    # an oxygen whose gauge (oxygen * 10 // 200 cells) overflows 32 bits fills it, as in Python
    names = GAMES["seaquest"]["scalars"]
    seaquest.kernel.scalars[names.index("oxygen")] = [2**31 - 1, 39]
    seaquest.step(np.zeros(2, np.int64))
    gauge = seaquest.obs[:, GAMES["seaquest"]["channels"].index("oxygen_guage"), 9]
    assert gauge.tolist() == [[1] * 10, [1] + [0] * 9]


@pytest.mark.parametrize("impl", ["native", pytest.param("reference", marks=needs_minatar)])
def test_next_step_autoreset_plays_the_same_episodes_one_step_later(impl):
    """NEXT_STEP: the ending step returns the terminal observation, the next one (its action
    ignored) the next episode's first with reward 0 and no flags; the native kernel plays the
    same episodes as in SAME_STEP mode, seed for seed."""
    from gymnasium.vector import AutoresetMode

    kwargs = dict(impl=impl, sticky_action_prob=0.0)
    same = make_env("MinAtar-Breakout-v1", 1, **kwargs)
    nxt = make_env("MinAtar-Breakout-v1", 1, autoreset_mode=AutoresetMode.NEXT_STEP, **kwargs)
    assert nxt.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    same.reset(seed=3)
    nxt.reset(seed=3)
    rng = np.random.default_rng(0)
    ends = 0
    for _ in range(300):
        action = rng.integers(0, 3, 1)
        obs, reward, terminated, truncated, info = same.step(action)
        n_obs, n_reward, n_terminated, n_truncated, _ = nxt.step(action)
        assert n_reward[0] == reward[0] and n_terminated[0] == terminated[0]
        if not terminated[0]:
            if impl == "native":
                assert np.array_equal(n_obs, obs)
            continue
        ends += 1
        assert np.array_equal(n_obs[0], info["final_obs"][0])
        n_obs, n_reward, n_terminated, n_truncated, _ = nxt.step(np.array([2]))  # ignored
        assert n_reward[0] == 0 and not n_terminated[0] and not n_truncated[0]
        if impl == "native":
            assert np.array_equal(n_obs, obs)
    assert ends > 5
    assert nxt.drain_episode_stats().episodes == same.drain_episode_stats().episodes == ends


def test_trains_through_the_unchanged_loop_with_a_frame_policy():
    """The family plugs into the loop as it is: a few PPO updates on Breakout's uint8 frames
    with the test suite's registered frame policy (the CNN policy itself is issue 16's later
    work), the frames stored as the kernel wrote them."""
    import torch

    import tests.families.frame  # noqa: F401  (registers the "tiny-cnn" frame policy)
    from operant.trainer.config import load_config
    from operant.trainer.loop.train import Trainer

    config = load_config(
        None,
        [
            "env.id=MinAtar-Breakout-v1",
            "env.num_envs=4",
            "ppo.num_steps=8",
            "ppo.num_minibatches=2",
            "train.total_steps=64",
            "policy.kind=tiny-cnn",
        ],
    )
    trainer = Trainer(config)
    assert type(trainer.policy).__name__ == "TinyCNN"
    record = trainer.run()
    assert record.global_step == 64 and record.updates == 2
    storage = trainer.storage.obs
    assert storage.dtype == torch.uint8 and storage.shape == (8, 4, 4, 10, 10)
    assert torch.all(storage[:, :, 0].sum(dim=(-1, -2)) == 1)  # one paddle per frame


@needs_minatar
def test_the_oracle_imports_without_a_warning_or_a_root_handler():
    # minatar's import warns through the root logger where seaborn is missing (its display),
    # which also gives a process without logging set up a stderr handler of the package's.
    code = (
        "import logging\n"
        "from operant.envs.minatar.reference import minatar_environment_class\n"
        "env = minatar_environment_class()('breakout')\n"
        "print(env.n_channels, len(logging.getLogger().handlers))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert (result.returncode, result.stdout, result.stderr) == (0, "4 0\n", "")
