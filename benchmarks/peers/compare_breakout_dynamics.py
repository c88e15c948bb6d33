#!/usr/bin/env python3
"""Is gymnax's Breakout-MinAtar the game Operant trains on (MinAtar's Breakout)? Fixed policies
on both, and a replay of the same actions from the same start on both.

    flock /work/bench.lock /work/venvs/jax/bin/python \
        benchmarks/peers/compare_breakout_dynamics.py [--episodes 1000] [--replay 200] \
        [--epsilon 0.02] [--replay-epsilon 0.01] [--operant-python /work/main/.venv/bin/python]

Run it with the JAX venv's Python (benchmarks/peers/setup_jax.sh): it steps gymnax's
`Breakout-MinAtar` (default params: 1,000-step cap, minimal action set, no sticky actions) and
MinAtar's own `minatar/environments/breakout.py` (imported as `minatar`, or loaded from
--minatar-breakout, a path to that file: it needs only numpy), and runs itself again under
--operant-python with `--side operant` for Operant's native kernel
(`operant/MinAtar-Breakout-v1`, sticky_action_prob 0, max_episode_steps 1000, through
`gymnasium.make_vec`); --operant-python "" skips that side.

Policies over the minimal actions (0 noop, 1 left, 2 right), each for --episodes episodes
(the first episode of each of that many envs; cap 1,000 steps on every side):
- random: uniform;
- follow: the paddle steps toward the ball's column (ball: channel 1, paddle: channel 0, row 9),
  noop under it; deterministic, so an episode depends only on the start (two starts);
- follow-eps: follow, but a uniform random action with probability --epsilon (0.02).

Replay: --replay episodes of follow-eps (--replay-epsilon, 0.01) stepped by MinAtar from a start
chosen by gymnax's reset (MinAtar's env is set to the same ball column and direction), the
actions recorded, then the same actions stepped by gymnax's step_env from that state; every
observation (all four channels), reward and terminal flag compared step by step; the first step
that differs is reported (none: the trajectories are the same).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from typing import Any

import numpy as np

CAP = 1000
NAMES = ("random", "follow", "follow-eps")
MINIMAL = (0, 1, 3)  # MinAtar's action_map indices of noop, left, right


def follow_action(ball_col: np.ndarray, paddle_col: np.ndarray) -> np.ndarray:
    """Right (2) when the ball is right of the paddle, left (1) when left, else noop (0)."""
    return np.where(ball_col > paddle_col, 2, np.where(ball_col < paddle_col, 1, 0))


def summary(returns: np.ndarray, lengths: np.ndarray) -> dict[str, float]:
    return {
        "episodes": int(len(returns)),
        "return_mean": float(np.mean(returns)),
        "return_sem": float(np.std(returns, ddof=1) / np.sqrt(len(returns))),
        "length_mean": float(np.mean(lengths)),
        "capped_fraction": float(np.mean(lengths >= CAP)),
    }


# ---------------------------------------------------------------- MinAtar (the reference)


def minatar_env_class(path: str | None) -> Any:
    if path:
        spec = importlib.util.spec_from_file_location("minatar_breakout", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.Env
    from minatar.environments.breakout import Env

    return Env


def minatar_episode(env: Any, policy: str, rng: np.random.RandomState, eps: float) -> tuple:
    """One episode from env's current (reset) state; returns return, length, actions, frames."""
    total, steps, actions, frames = 0.0, 0, [], []
    obs = env.state()
    while steps < CAP:
        if policy == "random" or (policy == "follow-eps" and rng.rand() < eps):
            a = rng.randint(3)
        else:
            ball = int(np.argmax(obs[:, :, 1].any(axis=0)))
            paddle = int(np.argmax(obs[9, :, 0]))
            a = int(follow_action(np.array(ball), np.array(paddle)))
        r, terminal = env.act(MINIMAL[a])
        obs = env.state()
        total += r
        steps += 1
        actions.append(a)
        frames.append((obs.copy(), r, terminal))
        if terminal:
            break
    return total, steps, actions, frames


def run_minatar(path: str | None, episodes: int, eps: float, seed: int) -> dict[str, Any]:
    Env = minatar_env_class(path)
    out = {}
    for i, policy in enumerate(NAMES):
        env = Env()
        env.random = np.random.RandomState(seed + i)
        rng = np.random.RandomState(seed + 100 + i)
        rets, lens = [], []
        for _ in range(episodes):
            env.reset()
            total, steps, _, _ = minatar_episode(env, policy, rng, eps)
            rets.append(total)
            lens.append(steps)
        out[policy] = summary(np.array(rets), np.array(lens))
    return out


# ---------------------------------------------------------------- Operant (native kernel)


def run_operant(episodes: int, eps: float, seed: int) -> dict[str, Any]:
    import gymnasium

    import operant.envs  # noqa: F401  (registers operant/...)

    out = {}
    for i, policy in enumerate(NAMES):
        envs = gymnasium.make_vec(
            "operant/MinAtar-Breakout-v1",
            num_envs=episodes,
            vectorization_mode="vector_entry_point",
            sticky_action_prob=0.0,
            max_episode_steps=CAP,
        )
        obs, _ = envs.reset(seed=seed + i)
        rng = np.random.RandomState(seed + 100 + i)
        rets = np.zeros(episodes)
        lens = np.zeros(episodes, dtype=np.int64)
        live = np.ones(episodes, dtype=bool)
        for _ in range(CAP + 1):
            if not live.any():
                break
            # obs: (N, C, 10, 10) uint8, channels paddle, ball, trail, brick
            ball = np.argmax(obs[:, 1].any(axis=1), axis=1)
            paddle = np.argmax(obs[:, 0, 9, :], axis=1)
            act = follow_action(ball, paddle)
            rand = rng.randint(3, size=episodes)
            if policy == "random":
                act = rand
            elif policy == "follow-eps":
                act = np.where(rng.rand(episodes) < eps, rand, act)
            obs, reward, terminated, truncated, _ = envs.step(act.astype(np.int64))
            rets += np.where(live, reward, 0.0)
            lens += live
            live &= ~(np.asarray(terminated) | np.asarray(truncated))
        envs.close()
        out[policy] = summary(rets, lens)
    return out


# ---------------------------------------------------------------- gymnax


def run_gymnax(episodes: int, eps: float, seed: int) -> dict[str, Any]:
    import gymnax
    import jax
    import jax.numpy as jnp

    env, params = gymnax.make("Breakout-MinAtar")
    assert params.max_steps_in_episode == CAP

    def act(key, obs, policy):
        ball = jnp.argmax(obs[:, :, 1].any(axis=0))
        paddle = jnp.argmax(obs[9, :, 0])
        follow = jnp.where(ball > paddle, 2, jnp.where(ball < paddle, 1, 0))
        k1, k2 = jax.random.split(key)
        rand = jax.random.randint(k1, (), 0, 3)
        if policy == "random":
            return rand
        if policy == "follow":
            return follow
        return jnp.where(jax.random.uniform(k2) < eps, rand, follow)

    def one(key, policy):
        key, k_reset = jax.random.split(key)
        obs, state = env.reset(k_reset, params)

        def body(carry, _):
            key, obs, state, total, steps, live = carry
            key, k_act, k_step = jax.random.split(key, 3)
            a = act(k_act, obs, policy)
            obs, state, r, term, trunc, _ = env.step(k_step, state, a, params)
            total = total + jnp.where(live, r, 0.0)
            steps = steps + live
            live = live & ~(term | trunc)
            return (key, obs, state, total, steps, live), None

        init = (key, obs, state, jnp.float32(0), jnp.int32(0), jnp.bool_(True))
        (_, _, _, total, steps, _), _ = jax.lax.scan(body, init, None, length=CAP + 1)
        return total, steps

    out = {}
    for i, policy in enumerate(NAMES):
        keys = jax.random.split(jax.random.PRNGKey(seed + i), episodes)
        rets, lens = jax.jit(jax.vmap(lambda k, p=policy: one(k, p)))(keys)
        out[policy] = summary(np.asarray(rets), np.asarray(lens))
    return out


def replay(path: str | None, count: int, eps: float, seed: int) -> dict[str, Any]:
    """MinAtar plays follow-eps from gymnax's reset state; gymnax replays the same actions."""
    import gymnax
    import jax
    import jax.numpy as jnp

    env, params = gymnax.make("Breakout-MinAtar")
    Env = minatar_env_class(path)
    ref = Env()
    rng = np.random.RandomState(seed + 7)
    step = jax.jit(lambda s, a: env.step_env(jax.random.PRNGKey(0), s, a, params))
    first_diff, lengths, returns = [], [], []
    for k in jax.random.split(jax.random.PRNGKey(seed + 7), count):
        obs0, state = env.reset(k, params)
        ref.reset()
        ref.ball_x = ref.last_x = int(state.ball_x)
        ref.ball_dir = int(state.ball_dir)
        diff = None if np.array_equal(ref.state(), np.asarray(obs0, bool)) else 0
        total, steps, actions, frames = minatar_episode(ref, "follow-eps", rng, eps)
        for t, (a, (frame, r, terminal)) in enumerate(zip(actions, frames), start=1):
            if diff is not None:
                break
            obs, state, rj, dj, _ = step(state, jnp.int32(a))
            same = np.array_equal(frame, np.asarray(obs, bool)) and float(rj) == r
            if not same or bool(dj) != terminal:
                diff = t
        first_diff.append(diff)
        lengths.append(steps)
        returns.append(total)
    diverged = [d for d in first_diff if d is not None]
    return {
        "episodes": count,
        "steps_compared": int(sum(lengths)),
        "length_mean": float(np.mean(lengths)),
        "max_return": float(max(returns)),
        "episodes_past_30_bricks": int(sum(r > 30 for r in returns)),
        "diverged": len(diverged),
        "first_divergence_steps": diverged[:10],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--replay", type=int, default=200)
    parser.add_argument("--epsilon", type=float, default=0.02)
    parser.add_argument("--replay-epsilon", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--minatar-breakout", default=None, help="path to minatar's breakout.py")
    parser.add_argument("--operant-python", default="/work/main/.venv/bin/python")
    parser.add_argument("--side", choices=("all", "operant"), default="all")
    args = parser.parse_args()
    if args.side == "operant":
        print(json.dumps(run_operant(args.episodes, args.epsilon, args.seed)))
        return
    path = args.minatar_breakout
    if path is None and importlib.util.find_spec("minatar") is None:
        path = "/work/main/.venv/lib/python3.11/site-packages/minatar/environments/breakout.py"
    sides: dict[str, Any] = {}
    t0 = time.time()
    sides["gymnax"] = run_gymnax(args.episodes, args.epsilon, args.seed)
    sides["minatar"] = run_minatar(path, args.episodes, args.epsilon, args.seed)
    if args.operant_python:
        command = [args.operant_python, os.path.abspath(__file__), "--side", "operant"]
        command += ["--episodes", str(args.episodes), "--epsilon", str(args.epsilon)]
        command += ["--seed", str(args.seed)]
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        sides["operant"] = json.loads(done.stdout.strip().splitlines()[-1])
    result = {"sides": sides, "replay": replay(path, args.replay, args.replay_epsilon, args.seed)}
    result["wall_s"] = round(time.time() - t0, 1)
    print(f"{'policy':<11} {'side':<8} {'return mean ± sem':>20} {'length':>8} {'capped':>7}")
    for policy in NAMES:
        for side, rows in sides.items():
            s = rows[policy]
            ret = f"{s['return_mean']:.2f} ± {s['return_sem']:.2f}"
            print(
                f"{policy:<11} {side:<8} {ret:>20} {s['length_mean']:>8.1f} "
                f"{s['capped_fraction']:>7.1%}"
            )
    print("replay:", json.dumps(result["replay"]))
    print(json.dumps(result))


if __name__ == "__main__":
    sys.exit(main())
