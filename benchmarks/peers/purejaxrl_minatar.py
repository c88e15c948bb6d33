#!/usr/bin/env python3
"""A PureJaxRL-style PPO on gymnax's Breakout-MinAtar: the JAX peer of Operant's same-recipe
MinAtar run (issue 37, "Same recipe, side by side"). Written for this benchmark from the design
of PureJaxRL's ppo.py (Lu et al. 2022); it shares no code with it.

Setup and run, in its own venv (never an Operant dependency):

    bash benchmarks/peers/setup_jax.sh                # makes /work/venvs/jax
    flock /tmp/operant-bench.lock /work/venvs/jax/bin/python \
        benchmarks/peers/purejaxrl_minatar.py --seed 1 --total-steps 5013504 --out seed1.json

benchmarks/peers/jax_side_by_side.py runs it and Operant's same recipe alternately, per seed.

What runs: the whole training is one jitted XLA program. Envs step inside it (gymnax's
`Breakout-MinAtar`, vmapped over the envs, auto-resetting); each update collects a rollout
with `lax.scan`, computes GAE with a reverse `lax.scan`, and runs the epochs and minibatches as
nested `lax.scan`s; a `lax.scan` over the updates is the training loop. Nothing returns to
Python until training ends.

The recipe (PureJaxRL's MinAtar settings): an MLP 64-64 ReLU on the flattened 10x10x4 frame,
separate actor and critic networks, orthogonal init (gain sqrt(2) on hidden layers, 0.01 on
the actor's head, 1.0 on the critic's), zero biases; Adam (eps 1e-5) at lr 5e-3 annealed
linearly to 0 per update, global grad-norm clip 0.5; 64 envs x 128 steps; 4 epochs x 8
minibatches of a fresh permutation; gamma 0.99, GAE lambda 0.95; clipped policy loss (0.2)
and clipped value loss (0.2 around the rollout's values, 0.5 x the larger square); entropy
0.01, value coef 0.5; advantages normalised per minibatch (std with ddof 0, + 1e-8). The
budget, --total-steps, is rounded UP to whole updates of num_envs x num_steps, as Operant
rounds (PureJaxRL rounds down): 5,013,504 is 612 updates of 8,192.

A time-limit truncation ends the episode as a terminal does (no bootstrap), as PureJaxRL does;
--bootstrap-truncation adds gamma x V(final observation) to a truncated step's reward instead
(Operant's rule), at the cost of one more critic forward per step.

The env: gymnax's default params for Breakout-MinAtar (gymnax 1.0.1): max_steps_in_episode
1,000 (a truncation), no sticky actions, MinAtar's minimal action set (noop, left, right).
Observations are float32 (10, 10, 4), channels last (paddle, ball, trail, brick), flattened
to 400 here. Breakout has no difficulty ramping in MinAtar either. Against MinAtar itself:
MinAtar's default sticky_action_prob is 0.1 and its games have no time limit.

What it reports: one JSON object, printed and written to --out. compile_s is the first call's
cost, timed apart (`jit(...).lower(key).compile()`: tracing and XLA's compile); train_s is
the compiled program's run alone, to `block_until_ready`; sps = steps trained / train_s.
return_mean_100 is the mean return of the last 100 episodes to finish, across all envs (a ring
of 100 written inside the rollout scan, in finishing order; envs finishing on the same step go
in env order), as Operant's episode_return_mean is; curve holds [global_step, that mean] after
every --curve-every updates and after the last.

Threads: no XLA_FLAGS are set. XLA:CPU runs one CPU device whose intra-op thread pool (Eigen)
has one thread per core the process may run on: both cores of this 2-core machine (the
update's matrix products use both: cores_busy 1.4-1.7 here with the machine free). The record
carries the affinity, the process's thread count, cpu_s / train_s (how many cores the run
kept busy) and the 1-minute load average before and after training: work outside the bench
lock shows there, and as cores_busy under 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import json
import math
import os
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import flax.linen as nn
import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.linen.initializers import constant, orthogonal

ENV_NAME = "Breakout-MinAtar"
RETURN_WINDOW = 100  # "last 100 episodes", Operant's and gymnasium's solved window


@dataclasses.dataclass(frozen=True)
class Recipe:
    """The training settings; the defaults are the recipe the module docstring states."""

    num_envs: int = 64
    num_steps: int = 128
    num_updates: int = 612
    learning_rate: float = 5e-3
    adam_eps: float = 1e-5
    max_grad_norm: float = 0.5
    update_epochs: int = 4
    num_minibatches: int = 8
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_eps: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    hidden_sizes: tuple[int, ...] = (64, 64)
    bootstrap_truncation: bool = False

    @property
    def batch_size(self) -> int:
        return self.num_envs * self.num_steps


class MLP(nn.Module):
    """ReLU hidden layers, then a linear head; orthogonal init, zero biases."""

    hidden_sizes: Sequence[int]
    out: int
    head_gain: float

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for width in self.hidden_sizes:
            dense = nn.Dense(width, kernel_init=orthogonal(np.sqrt(2)), bias_init=constant(0.0))
            x = nn.relu(dense(x))
        head = nn.Dense(self.out, kernel_init=orthogonal(self.head_gain), bias_init=constant(0.0))
        return head(x)


class ActorCritic(nn.Module):
    """Separate actor and critic MLPs over the same flat observation: (logits, value)."""

    num_actions: int
    hidden_sizes: Sequence[int]

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        logits = MLP(self.hidden_sizes, self.num_actions, 0.01)(obs)
        value = MLP(self.hidden_sizes, 1, 1.0)(obs)
        return logits, value[..., 0]


class Transition(NamedTuple):
    """One rollout step of every env; shapes (num_envs, ...), (steps, envs, ...) stacked."""

    obs: jax.Array
    action: jax.Array
    log_prob: jax.Array
    value: jax.Array
    reward: jax.Array
    done: jax.Array


class Episodes(NamedTuple):
    """Finished episodes' returns: the running sums per env, the ring of the newest 100 and
    how many have finished in all (the ring's write position is that count mod 100)."""

    running: jax.Array
    ring: jax.Array
    finished: jax.Array


class Runner(NamedTuple):
    """What the training loop carries from one update to the next."""

    params: Any
    opt_state: Any
    env_state: Any
    obs: jax.Array
    episodes: Episodes
    key: jax.Array


def record_episodes(episodes: Episodes, reward: jax.Array, done: jax.Array) -> Episodes:
    """Add a step's rewards; write each finished episode's return into the ring, in env order.
    Of more than 100 finishing on one step only the last 100 are written (the ring's slots
    then stay distinct, so the scatter has no collisions)."""
    total = episodes.running + reward
    finishing = done.sum(dtype=jnp.int32)
    rank = jnp.cumsum(done, dtype=jnp.int32) - 1
    kept = done & (rank >= finishing - RETURN_WINDOW)
    slot = jnp.where(kept, (episodes.finished + rank) % RETURN_WINDOW, RETURN_WINDOW)
    ring = episodes.ring.at[slot].set(total, mode="drop")
    running = jnp.where(done, 0.0, total)
    return Episodes(running, ring, episodes.finished + finishing)


def recent_mean(episodes: Episodes) -> jax.Array:
    """Mean return of the last 100 finished episodes (fewer while fewer have); NaN before any."""
    count = jnp.minimum(episodes.finished, RETURN_WINDOW)
    filled = jnp.arange(RETURN_WINDOW) < count
    total = jnp.where(filled, episodes.ring, 0.0).sum()
    return jnp.where(count > 0, total / jnp.maximum(count, 1), jnp.nan)


def log_prob_and_entropy(logits: jax.Array, action: jax.Array) -> tuple[jax.Array, jax.Array]:
    """A categorical's log-probability of `action` and its entropy."""
    log_probs = jax.nn.log_softmax(logits)
    chosen = jnp.take_along_axis(log_probs, action[..., None], axis=-1)[..., 0]
    entropy = -(jnp.exp(log_probs) * log_probs).sum(-1)
    return chosen, entropy


def flat(obs: jax.Array) -> jax.Array:
    """(envs, 10, 10, 4) frames as (envs, 400) rows, the MLP's input."""
    return obs.reshape(obs.shape[0], -1)


class PPO:
    """The training program: `train(key)` is pure and jits as a whole."""

    def __init__(self, recipe: Recipe) -> None:
        self.recipe = recipe
        self.env, self.env_params = gymnax.make(ENV_NAME)
        num_actions = self.env.action_space(self.env_params).n
        self.network = ActorCritic(num_actions, recipe.hidden_sizes)
        steps_per_update = recipe.update_epochs * recipe.num_minibatches

        def schedule(count: jax.Array) -> jax.Array:
            # Constant within an update, lr x (1 - update / num_updates): CleanRL's annealing.
            frac = 1.0 - (count // steps_per_update) / recipe.num_updates
            return recipe.learning_rate * frac

        self.optimizer = optax.chain(
            optax.clip_by_global_norm(recipe.max_grad_norm),
            optax.adam(learning_rate=schedule, eps=recipe.adam_eps),
        )

    def init(self, key: jax.Array) -> Runner:
        """Fresh parameters, optimizer state, envs and episode ring."""
        net_key, env_key, key = jax.random.split(key, 3)
        obs_size = math.prod(self.env.observation_space(self.env_params).shape)
        params = self.network.init(net_key, jnp.zeros((1, obs_size)))
        reset_keys = jax.random.split(env_key, self.recipe.num_envs)
        obs, env_state = jax.vmap(self.env.reset, in_axes=(0, None))(reset_keys, self.env_params)
        envs = self.recipe.num_envs
        episodes = Episodes(
            jnp.zeros(envs), jnp.zeros(RETURN_WINDOW), jnp.zeros((), dtype=jnp.int32)
        )
        return Runner(params, self.optimizer.init(params), env_state, flat(obs), episodes, key)

    def env_step(self, runner: Runner, _: None) -> tuple[Runner, Transition]:
        """Sample every env's action, step them all (auto-resetting), count episodes."""
        recipe = self.recipe
        key, action_key, step_key = jax.random.split(runner.key, 3)
        logits, value = self.network.apply(runner.params, runner.obs)
        action = jax.random.categorical(action_key, logits)
        log_prob, _ = log_prob_and_entropy(logits, action)
        step_keys = jax.random.split(step_key, recipe.num_envs)
        step = jax.vmap(self.env.step, in_axes=(0, 0, 0, None))
        obs, env_state, reward, terminated, truncated, info = step(
            step_keys, runner.env_state, action, self.env_params
        )
        done = terminated | truncated
        learned_reward = reward
        if recipe.bootstrap_truncation:
            _, final_value = self.network.apply(runner.params, flat(info["final_observation"]))
            cut = truncated & ~terminated
            learned_reward = reward + recipe.gamma * jnp.where(cut, final_value, 0.0)
        episodes = record_episodes(runner.episodes, reward, done)
        transition = Transition(runner.obs, action, log_prob, value, learned_reward, done)
        runner = runner._replace(env_state=env_state, obs=flat(obs), episodes=episodes, key=key)
        return runner, transition

    def advantages(self, rollout: Transition, last_value: jax.Array) -> jax.Array:
        """GAE over the rollout, newest step first; a step's `done` cuts what follows it."""
        recipe = self.recipe

        def backward(carry: tuple[jax.Array, jax.Array], step: Transition) -> Any:
            gae, next_value = carry
            alive = 1.0 - step.done
            delta = step.reward + recipe.gamma * next_value * alive - step.value
            gae = delta + recipe.gamma * recipe.gae_lambda * alive * gae
            return (gae, step.value), gae

        start = (jnp.zeros_like(last_value), last_value)
        _, advantages = jax.lax.scan(backward, start, rollout, reverse=True, unroll=16)
        return advantages

    def loss(
        self, params: Any, batch: Transition, advantages: jax.Array, targets: jax.Array
    ) -> jax.Array:
        """Clipped PPO loss of one minibatch: policy + vf_coef x value - ent_coef x entropy."""
        recipe = self.recipe
        logits, value = self.network.apply(params, batch.obs)
        log_prob, entropy = log_prob_and_entropy(logits, batch.action)
        clipped_value = batch.value + jnp.clip(
            value - batch.value, -recipe.clip_eps, recipe.clip_eps
        )
        value_loss = (
            0.5
            * jnp.maximum(jnp.square(value - targets), jnp.square(clipped_value - targets)).mean()
        )
        ratio = jnp.exp(log_prob - batch.log_prob)
        normalised = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        clipped_ratio = jnp.clip(ratio, 1.0 - recipe.clip_eps, 1.0 + recipe.clip_eps)
        policy_loss = -jnp.minimum(ratio * normalised, clipped_ratio * normalised).mean()
        return policy_loss + recipe.vf_coef * value_loss - recipe.ent_coef * entropy.mean()

    def minibatch_step(self, state: tuple[Any, Any], minibatch: Any) -> tuple[Any, None]:
        """One Adam step on one minibatch."""
        params, opt_state = state
        grads = jax.grad(self.loss)(params, *minibatch)
        updates, opt_state = self.optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), None

    def epoch(self, carry: tuple[Any, Any, Any, jax.Array], _: None) -> tuple[Any, None]:
        """One pass over the batch in a fresh random order, minibatch by minibatch."""
        params, opt_state, batch, key = carry
        key, order_key = jax.random.split(key)
        order = jax.random.permutation(order_key, self.recipe.batch_size)
        shape = (self.recipe.num_minibatches, -1)
        minibatches = jax.tree.map(lambda x: x[order].reshape(shape + x.shape[1:]), batch)
        (params, opt_state), _ = jax.lax.scan(self.minibatch_step, (params, opt_state), minibatches)
        return (params, opt_state, batch, key), None

    def update(self, runner: Runner, _: None) -> tuple[Runner, tuple[jax.Array, jax.Array]]:
        """Collect a rollout, then train on it; reports (last-100 mean, episodes finished)."""
        recipe = self.recipe
        runner, rollout = jax.lax.scan(self.env_step, runner, None, recipe.num_steps)
        _, last_value = self.network.apply(runner.params, runner.obs)
        advantages = self.advantages(rollout, last_value)
        targets = advantages + rollout.value
        batch = jax.tree.map(
            lambda x: x.reshape((recipe.batch_size,) + x.shape[2:]),
            (rollout, advantages, targets),
        )
        key, epochs_key = jax.random.split(runner.key)
        carry = (runner.params, runner.opt_state, batch, epochs_key)
        (params, opt_state, _, _), _ = jax.lax.scan(self.epoch, carry, None, recipe.update_epochs)
        runner = runner._replace(params=params, opt_state=opt_state, key=key)
        return runner, (recent_mean(runner.episodes), runner.episodes.finished)

    def train(self, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        """The whole run: per update, the last-100 mean and the episodes finished so far."""
        runner = self.init(key)
        _, curve = jax.lax.scan(self.update, runner, None, self.recipe.num_updates)
        return curve


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-steps", type=int, default=5_013_504, help="rounded up")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--num-envs", type=int, default=Recipe.num_envs)
    parser.add_argument("--num-steps", type=int, default=Recipe.num_steps)
    parser.add_argument("--curve-every", type=int, default=1, help="updates between points")
    parser.add_argument("--bootstrap-truncation", action="store_true")
    parser.add_argument("--out", type=Path, help="also write the JSON object here")
    args = parser.parse_args(argv)
    for name in ("total_steps", "num_envs", "num_steps", "curve_every"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be a positive integer")
    batch = args.num_envs * args.num_steps
    if batch % Recipe.num_minibatches:
        parser.error(
            f"--num-envs x --num-steps must be a multiple of {Recipe.num_minibatches}, "
            "the minibatches per epoch"
        )
    return args


def versions() -> dict[str, str]:
    names = ("jax", "jaxlib", "gymnax", "flax", "optax", "numpy")
    found = {name: importlib.metadata.version(name) for name in names}
    return {**found, "python": platform.python_version()}


def machine() -> dict[str, Any]:
    """The CPU and what XLA may use of it."""
    model = ""
    with open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "cpu": model,
        "cores_allowed": len(os.sched_getaffinity(0)),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "jax_devices": [str(device) for device in jax.devices()],
    }


def thread_count() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return 0


def curve_points(means: np.ndarray, batch: int, every: int) -> list[list[float | None]]:
    """[global_step, last-100 mean] after every `every` updates and after the last."""
    picks = list(range(every - 1, len(means), every))
    if picks[-1] != len(means) - 1:
        picks.append(len(means) - 1)
    return [[(i + 1) * batch, _number(means[i])] for i in picks]


def _number(value: Any) -> float | None:
    value = float(value)
    return round(value, 4) if math.isfinite(value) else None


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Compile, train, and the record of both."""
    batch = args.num_envs * args.num_steps
    recipe = Recipe(
        num_envs=args.num_envs,
        num_steps=args.num_steps,
        num_updates=-(-args.total_steps // batch),
        bootstrap_truncation=args.bootstrap_truncation,
    )
    ppo = PPO(recipe)
    key = jax.random.key(args.seed)
    started = time.perf_counter()
    compiled = jax.jit(ppo.train).lower(key).compile()
    compile_s = time.perf_counter() - started
    load_before = os.getloadavg()[0]
    cpu_started, started = time.process_time(), time.perf_counter()
    means, finished = jax.block_until_ready(compiled(key))
    train_s = time.perf_counter() - started
    cpu_s = time.process_time() - cpu_started
    means, finished = np.asarray(means), np.asarray(finished)
    steps = recipe.num_updates * batch
    return {
        "peer": "purejaxrl-style",
        "env": f"gymnax {ENV_NAME}",
        "env_params": dataclasses.asdict(ppo.env_params),
        "seed": args.seed,
        "total_steps": steps,
        "requested_steps": args.total_steps,
        "compile_s": round(compile_s, 3),
        "train_s": round(train_s, 3),
        "sps": round(steps / train_s, 1),
        "return_mean_100": _number(means[-1]),
        "episodes": int(finished[-1]),
        "recipe": {**dataclasses.asdict(recipe), "batch_size": recipe.batch_size},
        "cpu_s": round(cpu_s, 3),
        "cores_busy": round(cpu_s / train_s, 2),
        "process_threads": thread_count(),
        # Others' work on the machine (outside the bench lock) shows here, and as cores_busy < 1.
        "load_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "machine": machine(),
        "versions": versions(),
        "curve": curve_points(means, batch, args.curve_every),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    record = run(args)
    text = json.dumps(record)
    if args.out is not None:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
