"""What `operant bench env_only` does beside timing: the --validate shadow run (Gymnasium's
env beside each implementation for classic control; for a family, its own `shadow_check(steps)`
where its face has one, such as the MinAtar games against the minatar package, else its two
observation encoders, such as Grid-v0's) and the --profile per-phase step timings of an env
that offers `step_timing`.

Each check returns plain dicts for the JSON record; a report's "ok" decides exit code 2.
"""

from __future__ import annotations

from typing import Any

# Worlds stepped by an encoder shadow run: enough agents to meet every collision and regrowth
# path in a few hundred steps, few enough that --validate stays a quick pre-flight.
ENCODER_SHADOW_ENVS = 64


def has_own_family(env_id: str) -> bool:
    """Whether `env_id` is a family env (Grid-v0): no Gymnasium env to compare against."""
    from operant.envs.registry import FAMILIES, _key

    return _key(env_id) in FAMILIES


def validate(env_id: str, impls: list[str], num_envs: int, steps: int) -> list[dict[str, Any]]:
    """One report per implementation, printed as it finishes: Gymnasium's shadow check, or
    for a family env its two observation encoders compared byte for byte every step."""
    if has_own_family(env_id):
        report = _family_check(env_id, min(num_envs, ENCODER_SHADOW_ENVS), steps)
        print(f"validate {env_id} {report['impl']}: {report['summary']}", flush=True)
        return [report]
    from operant.envs.face.parity import shadow_check

    # (the reference impl is Gymnasium's own env: there is nothing to shadow it with)
    checked = [impl for impl in impls if impl != "reference"]
    if len(checked) < len(impls):
        print(f"validate {env_id} reference: Gymnasium's own env, nothing to compare", flush=True)
    reports = [shadow_check(env_id, impl, min(num_envs, 1024), steps) for impl in checked]
    for parity in reports:
        verdict = "matches Gymnasium" if parity.ok else f"MISMATCH: {parity.mismatch}"
        print(
            f"validate {env_id} {parity.impl}: {parity.compared:,} env-steps, "
            f"{parity.episodes_ended:,} episodes ended: {verdict}",
            flush=True,
        )
    return [parity.as_dict() for parity in reports]


def disagreement(env_id: str, reports: list[dict[str, Any]] | None = None) -> str:
    """What a failed --validate means for `env_id`, for the one-line refusal (a family's own
    shadow check says it in its report's "disagreement")."""
    for report in reports or ():
        if not report.get("ok", True) and report.get("disagreement"):
            return str(report["disagreement"])
    if has_own_family(env_id):
        return f"{env_id}'s two observation encoders disagree"
    return "the implementation disagrees with Gymnasium"


def _family_check(env_id: str, num_envs: int, steps: int) -> dict[str, Any]:
    """A family's own shadow check where its face offers one, else its encoders compared."""
    from operant.envs import make_env
    from operant.envs.contract import ShadowChecked

    env = make_env(env_id, num_envs, copy=False)
    try:
        if isinstance(env, ShadowChecked):
            return dict(env.shadow_check(steps))
    finally:
        env.close()
    return _encoder_check(env_id, num_envs, steps)


def _encoder_check(env_id: str, num_envs: int, steps: int) -> dict[str, Any]:
    import numpy as np

    from operant.envs import make_env
    from operant.envs.contract import BatchEnv, ComparesEncoders
    from operant.envs.face.parity import random_actions

    # Typed as the BatchEnv it is, so that the isinstance below adds ComparesEncoders to it.
    env: BatchEnv = make_env(env_id, num_envs, copy=False, validate=True)
    if not isinstance(env, ComparesEncoders):
        env.close()
        raise ValueError(f"--validate: {env_id} has neither a Gymnasium env nor two encoders")
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(steps):
        env.actions[:] = random_actions(env, rng)
        env.step_bound()
    mismatches = env.obs_mismatches
    compared = steps * env.layout.num_rows  # (agents: rows)
    env.close()
    verdict = "encoders agree" if mismatches == 0 else f"MISMATCH: {mismatches:,} bytes differ"
    return {
        "impl": "encoders",
        "ok": mismatches == 0,
        "compared": compared,
        "mismatched_bytes": mismatches,
        "summary": f"{compared:,} agent-steps with both observation encoders: {verdict}",
    }


def profile_kwargs(env_id: str, profile: bool) -> dict[str, Any]:
    """make_env's options for a --profile run; refuses (ValueError) an env without timings."""
    if not profile:
        return {}
    if not has_own_family(env_id):
        raise ValueError(f"--profile: {env_id} has no per-phase step timing (Grid-v0 has)")
    return {"profile": True}


def phase_profile(before: dict[str, int], after: dict[str, int], steps: int) -> dict[str, Any]:
    """The measured rounds' per-phase nanoseconds: summed, and per step (one step of all envs)."""
    summed = {phase: after[phase] - before[phase] for phase in after}
    return {
        "steps": steps,
        "phase_ns": summed,
        "phase_ns_per_step": {phase: round(ns / steps, 1) for phase, ns in summed.items()},
    }


def print_profile(env_id: str, num_envs: int, profile: dict[str, Any]) -> None:
    per_step = profile["phase_ns_per_step"]
    parts = "  ".join(f"{phase} {ns:,.0f}" for phase, ns in per_step.items())
    print(f"profile {env_id} N={num_envs:>6} ns/step: {parts}", flush=True)
