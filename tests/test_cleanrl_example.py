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
