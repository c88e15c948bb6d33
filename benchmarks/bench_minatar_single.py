"""One MinAtar env stepped through Gymnasium's single-env API, Operant's against the `minatar`
package's own Gymnasium env, alternating in one process.

- operant: `gymnasium.make("operant/MinAtar-<Game>-v1")` (operant.envs.minatar.env: the kernel
  with one row);
- minatar: `gymnasium.make("MinAtar/<Game>-v1")` (the package's `minatar.gym.BaseEnv`, minimal
  action set, as Operant's ids).

Each round steps each env `--steps` times with the same random actions (a reset where an
episode ends), MinAtar's defaults (sticky actions 0.1, ramping); reported: microseconds a step
(medians of the rounds) and the median of the rounds' ratios (minatar / operant).

    python benchmarks/bench_minatar_single.py --rounds 5

Needs the `minatar` extra.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time

import gymnasium
import numpy as np

import operant.envs  # noqa: F401  (registers operant/<id>)


def microseconds_a_step(env: gymnasium.Env, actions: np.ndarray) -> float:
    env.reset(seed=0)
    started = time.perf_counter()
    for action in actions:
        _, _, terminated, truncated, _ = env.step(int(action))
        if terminated or truncated:
            env.reset()
    return (time.perf_counter() - started) / len(actions) * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", nargs="+", default=["Breakout", "Seaquest"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20_000)
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # minatar warns that it cannot import seaborn
    import minatar.gym

    minatar.gym.register_envs()
    print(f"{'game':<14} {'operant us':>10} {'minatar us':>10} {'ratio':>6}")
    for game in args.games:
        ours = gymnasium.make(f"operant/MinAtar-{game}-v1").unwrapped
        theirs = gymnasium.make(f"MinAtar/{game}-v1").unwrapped
        actions = np.random.default_rng(0).integers(0, ours.action_space.n, args.steps)
        times: dict[str, list[float]] = {"operant": [], "minatar": []}
        for _ in range(args.rounds):
            times["operant"].append(microseconds_a_step(ours, actions))
            times["minatar"].append(microseconds_a_step(theirs, actions))
        ratio = statistics.median(b / a for a, b in zip(times["operant"], times["minatar"]))
        print(
            f"{game:<14} {statistics.median(times['operant']):>10.2f} "
            f"{statistics.median(times['minatar']):>10.2f} {ratio:>5.2f}x"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
