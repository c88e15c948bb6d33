"""Shadow validation: step an Operant env and Gymnasium's own env side by side and compare.

`operant bench env_only --validate` runs this before it measures anything. Every step, each
shadowed Gymnasium env is put into exactly the state the Operant env is in (so chaotic envs
such as Acrobot compare one step of dynamics, never two diverged trajectories), both take the
same random action, and Operant's observation (the terminal one where an episode ended),
reward, terminated and truncated flags must equal Gymnasium's — flags exactly, floats within
float32 tolerance. The autoresets in between are covered by reading the state back every step.

The test suite's whole-trajectory parity (tests/test_env_parity.py) is the stronger check;
this one is cheap enough to run in front of every benchmark, so a number is never reported
for an env that has stopped computing the right thing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from operant.envs.contract import to_host

RTOL = ATOL = 1e-5


@dataclass
class ParityReport:
    env_id: str
    impl: str
    num_envs: int
    steps: int
    compared: int = 0
    episodes_ended: int = 0
    mismatch: str | None = None

    @property
    def ok(self) -> bool:
        return self.mismatch is None

    def as_dict(self) -> dict[str, Any]:
        return {
            "env_id": self.env_id,
            "impl": self.impl,
            "num_envs": self.num_envs,
            "steps": self.steps,
            "compared": self.compared,
            "episodes_ended": self.episodes_ended,
            "ok": self.ok,
            "mismatch": self.mismatch,
        }


def random_actions(env, rng: np.random.Generator) -> np.ndarray:
    """One uniformly random action per env of a vector env: int64 for a Discrete space,
    float32 within the bounds for a Box."""
    from gymnasium import spaces

    space = env.single_action_space
    if isinstance(space, spaces.Discrete):
        return rng.integers(0, space.n, size=env.num_envs)
    return rng.uniform(space.low, space.high, size=(env.num_envs, *space.shape)).astype(np.float32)


def _state(env) -> np.ndarray:
    """The (state_dim, N) float64 state of a native or torch env."""
    return to_host(env.kernel.state if env.impl == "native" else env.state)


def _gymnasium_env(env_id: str):
    import gymnasium

    return gymnasium.make(env_id).unwrapped


def _inject(shadows: list[Any], state: np.ndarray) -> None:
    """Put env i's state (column i of `state`) into shadow i, as a fresh non-terminal state."""
    for i, shadow in enumerate(shadows):
        shadow.state = np.array(state[:, i], dtype=np.float64)
        if hasattr(shadow, "steps_beyond_terminated"):
            shadow.steps_beyond_terminated = None


def _first_mismatch(checks: tuple[tuple[str, np.ndarray, np.ndarray, bool], ...]) -> str:
    """'env I: FIELD GOT where Gymnasium gives WANT' for the first disagreeing (field, env) of
    `checks` ((field, got, want, exact) per field, in order), or '' when all agree."""
    for name, got, want, exact in checks:
        equal = (got == want) if exact else np.isclose(got, want, rtol=RTOL, atol=ATOL)
        if equal.ndim > 1:
            equal = equal.all(axis=tuple(range(1, equal.ndim)))
        if not equal.all():
            i = int(np.flatnonzero(~equal)[0])
            return f"env {i}: {name} {got[i]!r} where Gymnasium gives {want[i]!r}"
    return ""


def _step_mismatch(env: Any, results: list[Any], elapsed: np.ndarray) -> tuple[str, Any]:
    """Compare one step of `env` with its shadows' `results`: the first mismatch and `done`."""
    obs, final_obs = to_host(env.obs), to_host(env.final_obs)
    rewards, terminated, truncated = (
        to_host(env.rewards),
        to_host(env.terminated),
        to_host(env.truncated),
    )
    expected_obs = np.stack([np.asarray(r[0], dtype=np.float32) for r in results])
    expected_reward = np.array([r[1] for r in results], dtype=np.float32)
    expected_terminated = np.array([bool(r[2]) for r in results])
    expected_truncated = (elapsed >= env.max_episode_steps) & ~expected_terminated
    done = expected_terminated | expected_truncated
    seen_obs = np.where(done[:, None], final_obs, obs)
    mismatch = _first_mismatch(
        (
            ("terminated", terminated.astype(bool), expected_terminated, True),
            ("truncated", truncated.astype(bool), expected_truncated, True),
            ("reward", rewards, expected_reward, False),
            ("observation", seen_obs, expected_obs, False),
        )
    )
    return mismatch, done


def shadow_check(
    env_id: str,
    impl: str = "native",
    num_envs: int = 256,
    steps: int = 200,
    seed: int = 0,
    reference: Callable[[str], Any] | None = None,
) -> ParityReport:
    """Step `num_envs` copies of `env_id` (`impl`) and as many `reference(env_id)` envs
    (Gymnasium's, unwrapped, by default) for `steps` steps; the first disagreement is
    reported, naming the step, the env index, the field and both values."""
    from gymnasium import spaces

    from operant.envs import make_env

    env = make_env(env_id, num_envs, impl=impl, copy=False)
    env.reset(seed=seed)
    reference = reference or _gymnasium_env
    shadows = [reference(env_id) for _ in range(num_envs)]
    for shadow in shadows:
        shadow.reset(seed=seed)
    space = env.single_action_space
    rng = np.random.default_rng(seed)
    report = ParityReport(env_id, impl, num_envs, steps)
    elapsed = np.zeros(num_envs, dtype=np.int64)
    try:
        for t in range(steps):
            state = _state(env)
            _inject(shadows, state)
            actions = random_actions(env, rng)
            per_env = actions.tolist() if isinstance(space, spaces.Discrete) else list(actions)
            if impl == "torch":
                import torch

                env.actions.copy_(torch.from_numpy(actions))
            else:
                env.actions[:] = actions
            env.step_bound()
            results = [shadow.step(action) for shadow, action in zip(shadows, per_env)]
            elapsed += 1
            mismatch, done = _step_mismatch(env, results, elapsed)
            if mismatch:
                report.mismatch = f"{env_id} ({impl}) step {t}, {mismatch}"
                return report
            elapsed[done] = 0
            report.compared += num_envs
            report.episodes_ended += int(done.sum())
        return report
    finally:
        env.close()
