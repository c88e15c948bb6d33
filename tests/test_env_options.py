"""env.options: the env's own keywords from a config (`[env.options]`) or the command line
(`--set env.options.NAME=VALUE`) reach every builder of the env (trainer, preflight, eval); an
env without options, an unknown option and a bad value are refused in one line, exit 2,
nothing created."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from operant.envs import EnvError, make_env
from operant.trainer.config import ConfigError, env_kwargs, load_config
from operant.trainer.loop.train import Trainer

SMALL = ["env.num_envs=2", "ppo.num_steps=8", "ppo.num_minibatches=2", "train.total_steps=96"]


def test_options_come_from_a_table_or_from_set(tmp_path):
    path = tmp_path / "grid.toml"
    path.write_text('[env]\nid = "Grid-v0"\n\n[env.options]\nagents = 3\nwidth = 9\n')
    config = load_config(path, ["env.options.height=7", "env.options.wall_density=0.0"])
    assert config.env.options == {"agents": 3, "width": 9, "height": 7, "wall_density": 0.0}
    assert env_kwargs(config) == {"options": config.env.options}
    with pytest.raises(ConfigError, match=r"ppo.learning_rate is not a table"):
        load_config(None, ["ppo.learning_rate=0.1", "ppo.learning_rate.x=1"])


def test_the_trainer_builds_the_world_the_options_describe():
    config = load_config(
        None,
        [
            "env.id=Grid-v0",
            "env.options.agents=3",
            "env.options.width=9",
            "env.options.height=7",
            "env.options.window=5",
            "env.options.tokens=30",
            *SMALL,
        ],
    )
    trainer = Trainer(config)
    assert trainer.env.layout.agents_per_env == 3
    assert trainer.env.layout.num_rows == 6
    assert tuple(trainer.storage.obs.shape) == (8, 6, 30, 3)
    trainer.run()
    assert trainer.global_step == 96  # rows (agents) x steps: two updates of 8 x 6


def test_make_env_refuses_options_for_an_env_without_them():
    with pytest.raises(EnvError, match=r"CartPole-v1's native implementation takes no options"):
        make_env("CartPole-v1", 2, options={"agents": 2})


def _pendulum_states(**kwargs):
    env = make_env("Pendulum-v1", 4, impl="reference", copy=False, **kwargs)
    env.reset(seed=1)
    observed = []
    for _ in range(20):
        env.actions[:] = 0.5
        env.step_bound()
        observed.append(env.obs.copy())
    env.close()
    return np.stack(observed)


def test_gymnasiums_own_keywords_reach_a_reference_env_in_process_and_in_workers():
    # (they were a TypeError naming ReferenceVectorEnv; docs/ecosystem.md says they go to
    # the env)
    env = make_env("Pendulum-v1", 2, impl="reference", g=1.5)
    assert [e.unwrapped.g for e in env.inner.envs] == [1.5, 1.5]
    env = make_env("Pendulum-v1", 2, impl="reference", options={"g": 2.5})
    assert env.inner.envs[0].unwrapped.g == 2.5
    env = make_env("CartPole-v1", 2, impl="reference", sutton_barto_reward=True)
    assert env.inner.envs[0].unwrapped._sutton_barto_reward is True
    weightless = _pendulum_states(g=0.0)
    assert np.array_equal(_pendulum_states(g=0.0, workers=2), weightless)
    assert not np.array_equal(_pendulum_states(), weightless)


def test_trainer_builds_gymnasiums_env_with_env_options():
    config = load_config(
        None, ["env.id=Pendulum-v1", "env.impl=reference", "env.options.g=4.0", *SMALL]
    )
    trainer = Trainer(config)
    assert trainer.env.inner.envs[1].unwrapped.g == 4.0


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        (dict(impl="reference", gee=1.0),
         "Pendulum-v1 (Gymnasium's PendulumEnv) takes no keyword 'gee'; it takes: g"),
        (dict(impl="native", g=1.0),
         "Pendulum-v1 (native) has no option 'g'; its options: max_episode_steps, "
         "autoreset_mode, render_mode; Gymnasium's env takes its own keywords with "
         'impl="reference"'),
        (dict(impl="reference", workers=2, g=object()),
         "the env's keywords go to env workers as JSON, and Object of type object is not "
         "JSON serializable: give plain values"),
        (dict(impl="reference", workers=2, render_mode="rgb_array"),
         "render_mode: env workers do not render; use env.workers = 1"),
        (dict(impl="reference", env_kwargs={"g": 1.0}),
         "env_kwargs: give the env's keywords as keywords (or as env.options)"),
    ],
)  # fmt: skip
def test_a_keyword_the_env_does_not_take_is_one_line(kwargs, said):
    with pytest.raises(EnvError) as raised:
        make_env("Pendulum-v1", 4, **kwargs)
    assert str(raised.value).startswith(said)


@pytest.mark.parametrize(
    "sets, message",
    [
        (
            ["env.options.agents=2"],
            "operant-train: env.options: CartPole-v1's native implementation takes no options "
            "(got agents); Gymnasium's env takes its own keywords with env.impl = "
            '"reference", a family such as Grid-v0 its own: else remove [env.options]',
        ),
        (  # (taken, and ignored: the trainer steps SAME_STEP)
            ["env.id=MinAtar-Breakout-v1", "env.options.autoreset_mode=next_step"],
            "operant-train: env.options.autoreset_mode is make_env's keyword, which the trainer "
            "sets itself",
        ),
        (  # (the frame stack was named first, and dropping it did not help)
            ["env.id=MinAtar-Breakout-v1", "env.frame_stack=4", "env.overlap=true"],
            "operant-train: env.overlap = true is for the native classic-control kernels, not "
            "MinAtar-Breakout-v1",
        ),
        (
            ["env.impl=reference", "env.options.agents=2"],
            "operant-train: CartPole-v1 (Gymnasium's CartPoleEnv) takes no keyword 'agents'; "
            "it takes: sutton_barto_reward",
        ),
        (
            ["env.id=Grid-v0", "env.options.agent=2"],
            "operant-train: env.options for Grid-v0: ",
        ),
        (
            ["env.id=Grid-v0", "env.options.agents=500", "env.options.width=5"],
            "operant-train: env.options for Grid-v0: ",
        ),
    ],
)
def test_bad_options_are_refused_in_one_line_before_anything_starts(tmp_path, sets, message):
    runs = tmp_path / "runs"
    command = [sys.executable, "-m", "operant.trainer.run.main", "--runs-dir", str(runs)]
    for item in sets:
        command += ["--set", item]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), lines
    assert not runs.exists() or not any(Path(runs).iterdir())
