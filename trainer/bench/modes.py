"""Which `operant bench` options each mode reads: one given to a mode that does not read it
is refused in one line, not ignored (`env_only --config x.toml` measured the default env as if
no config was given)."""

from __future__ import annotations

import argparse

MODES = ("env_only", "trainer", "trainer_eval")

# The options each mode reads beyond those every mode reads (--max-cv, --target-sps,
# --enforce-target, --output): one given to a mode that does not read it is refused, not
# ignored (`env_only --config x.toml` measured the default env as if no config was given).
_EVERY_MODE = {"mode", "max_cv", "target_sps", "enforce_target", "output"}
_MEASURED = {"env", "num_envs", "max_mem_delta", "plot", "baseline"}
_TRAINER_CELLS = {"num_steps", "minibatches", "matrix", "warmup", "config", "overrides"}
_MODE_OPTIONS = {
    "env_only": _MEASURED
    | {"impl", "validate", "validate_steps", "profile", "rounds", "round_seconds", "no_gymnasium"},
    "trainer": _MEASURED
    | _TRAINER_CELLS
    | {"total_steps", "seeds", "target_return", "no_bound", "bound_seconds", "nproc_per_node"},
    "trainer_eval": _MEASURED | _TRAINER_CELLS | {"rounds", "round_seconds", "seeds"},
    # trainer --nproc-per-node: whole operant-train runs under torchrun, in other processes
    "ranks": {"env", "num_envs", "num_steps", "minibatches", "config", "overrides"}
    | {"total_steps", "seeds", "target_return", "nproc_per_node", "weak_scaling"},
}


def foreign_option(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str | None:
    """The first option given (parsed by `parser`, operant bench's) that this mode would not
    read, as a one-line refusal."""
    mode = "ranks" if args.mode == "trainer" and args.nproc_per_node else args.mode
    allowed = _EVERY_MODE | _MODE_OPTIONS[mode]
    for action in parser._actions:
        dest = action.dest
        if dest in allowed or dest == "help" or getattr(args, dest) == action.default:
            continue
        flag = max(action.option_strings, key=len)
        if mode == "ranks":
            return (
                f"{flag} is not an option of trainer --nproc-per-node (its runs are whole "
                "operant-train processes under torchrun)"
            )
        readers = [name for name in MODES if dest in _MODE_OPTIONS[name]]
        if not readers:
            return f"{flag} goes with trainer --nproc-per-node"
        return f"{flag} is not an option of {args.mode} (it is for {' and '.join(readers)})"
    if args.mode == "trainer_eval" and args.seeds and len(args.seeds) > 1:
        return "trainer_eval measures one seed's rollouts: give --seeds with one seed"
    return None
