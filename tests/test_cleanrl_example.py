"""examples/cleanrl_ppo.py: CleanRL's PPO loop on Operant's CartPole learns.

It runs as a user runs it, in a subprocess, and the test reads the episodic returns it prints.
A random CartPole policy returns about 22. With CleanRL's defaults (the learning rate annealed
over the whole budget) a 40,000-step run returned about 30 over its first 5,000 steps and about
185 over its last 5,000 when this test was written (seed 1).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "cleanrl_ppo.py"
TOTAL_TIMESTEPS = 40_000
EPISODE_LINE = re.compile(r"^global_step=(\d+), episodic_return=([-\d.]+)$", re.MULTILINE)


def test_cleanrl_ppo_example_learns_cartpole():
    # One torch thread: a 64-unit MLP gains nothing from more, and on a loaded machine they spin.
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [
            sys.executable,
            str(EXAMPLE),
            "--total-timesteps",
            str(TOTAL_TIMESTEPS),
            "--seed",
            "1",
            "--no-cuda",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    episodes = [(int(step), float(value)) for step, value in EPISODE_LINE.findall(result.stdout)]
    first = [value for step, value in episodes if step <= 5_000]
    last = [value for step, value in episodes if step > TOTAL_TIMESTEPS - 5_000]
    assert len(first) > 50 and len(last) > 5
    assert np.mean(first) < 60.0  # it starts from a near-random policy ...
    assert np.mean(last) >= 120.0  # ... and learns
    assert max(step for step, _ in episodes) <= TOTAL_TIMESTEPS


def _episodes(*flags: str) -> list[tuple[int, float]]:
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), *flags, "--seed", "1", "--no-cuda"],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return [(int(step), float(value)) for step, value in EPISODE_LINE.findall(result.stdout)]


def test_the_example_reads_frames_and_agent_rows():
    # MinAtar's uint8 (4, 10, 10) frames through the flattening MLP (it crashed on the shape),
    # and the grid's 4 worlds of 8 agents: 32 rows a step, each trained as an env.
    frames = _episodes("--env-id", "operant/MinAtar-Breakout-v1", "--num-envs", "8",
                       "--total-timesteps", "2048")  # fmt: skip
    assert len(frames) > 20 and all(value >= 0 for _, value in frames)
    rows = _episodes("--env-id", "operant/Grid-v0", "--total-timesteps", "8192")
    # 8,192 steps of 32 rows a step (num_steps 128: two updates) are 256 steps of the worlds:
    # two 128-step episodes of each agent, each ending at a global_step that counts rows
    assert len(rows) == 64 and {step for step, _ in rows} == {128 * 32, 256 * 32}


def test_cleanrls_own_env_ids_name_operants_envs():
    """`--env-id CartPole-v1`, CleanRL's default id, was a traceback (Gymnasium's own CartPole
    takes no impl=): it names Operant's env of that name; an id Operant lacks, or an impl the
    numpy wrappers cannot take, is one usage line, exit 2."""
    episodes = _episodes("--env-id", "CartPole-v1", "--total-timesteps", "2048")
    assert len(episodes) > 20 and all(0 < value <= 500 for _, value in episodes)
    for flags, message in (
        (["--env-id", "Foo-v0"], "--env-id Foo-v0: not one of Operant's envs (operant/Acrobot-v1"),
        (["--env-impl", "torch"], "argument --env-impl: invalid choice: 'torch'"),
    ):
        result = subprocess.run(
            [sys.executable, str(EXAMPLE), *flags], capture_output=True, text=True, check=False
        )
        assert result.returncode == 2 and message in result.stderr.splitlines()[-1], result.stderr
        assert "Traceback" not in result.stderr
