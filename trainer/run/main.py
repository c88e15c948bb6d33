"""`operant-train`: headless PPO training.

Exit codes:
  0  training finished (budget spent, or train.target_return reached), or stopped by SIGTERM
     or SIGINT at an update boundary after writing a checkpoint (`--resume` continues it)
  1  training failed (an error, or a non-finite loss or parameter: the metrics file says
     why, and the last good checkpoint is kept)
  2  bad input: flags, config file, config values, env id, a run to resume that does not
     exist, has no usable checkpoint or is trained by another process; or what the config
     asks of this machine is not there: the device, a package the env needs, the memory the
     config would allocate (operant.trainer.run.preflight). Nothing was started and nothing was
     overwritten
  75  the disk is full (or failing): the run directory or metrics file could not be created
     (nothing is left behind), or the final checkpoint or model.pt could not be written (the
     earlier checkpoints are kept: free space, then --resume). Periodic checkpoints the disk
     refuses are warnings, not failures (operant.trainer.run.errors)
  130  interrupted by a second SIGINT, without a final checkpoint
"""

from __future__ import annotations

import argparse
import atexit
import os
import signal
import sys
from typing import Any

from operant.shared.cli_parser import OneLineParser
from operant.trainer.run.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="operant-train",
        description="Train a policy with PPO, headless. Config: defaults < --config FILE < "
        "dedicated flags < --set section.key=value.",
        epilog="Exit codes: 0 finished (or stopped by SIGTERM/SIGINT, checkpointed), "
        "1 training failed, 2 bad input (or a device, package or memory this machine "
        "lacks), 75 the disk is full, 130 a second SIGINT.",
    )
    parser.add_argument("--config", metavar="FILE.toml", help="TOML config file")
    parser.add_argument(
        "--set",
        dest="overrides",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="override one config value, e.g. ppo.learning_rate=1e-3",
    )
    parser.add_argument("--env", help="environment id (env.id), e.g. CartPole-v1")
    parser.add_argument("--total-steps", type=int, metavar="N", help="train.total_steps")
    parser.add_argument("--seed", type=int, metavar="S", help="train.seed")
    parser.add_argument("--runs-dir", metavar="DIR", help="runs root (train.runs_dir)")
    parser.add_argument("--run-id", metavar="ID", help="run directory name (train.run_id)")
    parser.add_argument(
        "--resume",
        metavar="RUN_ID|latest|auto",
        help="continue a run from its newest checkpoint, in its directory; auto: "
        "continue the configured train.run_id if it has a checkpoint, else "
        "start it",
    )
    parser.add_argument(
        "--log-format",
        choices=("plain", "json"),
        default=None,
        help="plain: one line per update (train.log_every); json: one JSON object per line. "
        "Without it: one status line redrawn in place on a terminal, else a line a second",
    )
    parser.add_argument(
        "--tensorboard",
        action="store_true",
        default=None,
        help="also write TensorBoard event files into the run directory (train.tensorboard)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines, only the summary")
    parser.add_argument(
        "--detach",
        action="store_true",
        help="train in the background (log in the run directory), print the run id",
    )
    parser.add_argument(
        "--monitor",
        action="store_true",
        help="train in the background and watch it here (q detaches)",
    )
    from operant.trainer.distributed import handoff

    handoff.add_arguments(parser)
    return parser


def _flag_problem(args: argparse.Namespace) -> str | None:
    """A flag that would be ignored or misread, in one line; None when there is none."""
    alone = [
        flag
        for flag, value in (
            ("--nnodes", args.nnodes),
            ("--max-restarts", args.max_restarts),
            ("--rdzv-endpoint", args.rdzv_endpoint),
            ("--rdzv-id", args.rdzv_id),
        )
        if value is not None
    ]
    if alone and args.nproc_per_node is None and "LOCAL_RANK" not in os.environ:
        return f"{alone[0]} is for ranks under torchrun: give --nproc-per-node K with it"
    if args.runs_dir is not None and not args.runs_dir.strip():
        return "--runs-dir is empty: give it a directory (leave it out for the default root)"
    if args.monitor and not args.detach and not (sys.stdin.isatty() and sys.stdout.isatty()):
        return (
            "--monitor watches the run in this terminal, and there is none; use --detach, "
            "then operant monitor --once or --json"
        )
    return None


def _flag_values(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    extra: dict[str, dict[str, Any]] = {}
    for value, section, key in (
        (args.env, "env", "id"),
        (args.total_steps, "train", "total_steps"),
        (args.seed, "train", "seed"),
        (args.runs_dir, "train", "runs_dir"),
        (args.run_id, "train", "run_id"),
        (args.tensorboard, "train", "tensorboard"),
    ):
        if value is not None:
            extra.setdefault(section, {})[key] = value
    return extra


def _run_as_rank(args: argparse.Namespace, signals: Any) -> int | None:
    """Train as a rank of torchrun's group (operant.trainer.distributed.ranks); None if the group
    is one
    process (WORLD_SIZE 1: a lone trainer)."""
    from operant.trainer.config import ConfigError
    from operant.trainer.distributed.group import launch_from_environ

    try:
        launch = launch_from_environ()
    except ConfigError as error:
        print(f"operant-train: {error}", file=sys.stderr)
        return EXIT_USAGE
    if not launch.distributed:
        return None
    from operant.trainer.distributed.ranks import run_rank

    return run_rank(args, launch, signals, _flag_values(args))


def _watch_env_steps(signals: Any) -> None:
    """From the first second, a Python env built, reset or stepped in this process that hangs
    past env.stop_grace_s after a stop signal is cut (operant.envs.reference.step_deadline): the
    probe and the trainer's build reset the env before the session (whose service sets the run's
    own grace) begins."""
    from operant.envs.reference import step_deadline

    def clock() -> tuple[float, str] | None:
        return (signals.received_at, signals.name) if signals.stop_requested else None

    step_deadline.watch_stops(clock)
    signals.on_stop.append(step_deadline.stop_came)


def main(argv: list[str] | None = None) -> int:
    from operant.trainer.run.terminal import prioritize_journal

    prioritize_journal()
    args = build_parser().parse_args(argv)
    launching = args.detach or args.monitor
    status = _refuse_or_hand_off(args, argv, launching)
    if status is not None:
        return status
    # The trainer's handlers go in first (not for a launcher, whose Ctrl-C must just work):
    # a SIGTERM during the slow imports below still ends in a clean stop.
    from operant.trainer.run.signals import StopSignals

    signals = StopSignals()
    # Under torchrun each node's journal says once that a stop was taken (its local rank 0
    # says it), from the first second: set before the handlers go in.
    signals.announce = os.environ.get("LOCAL_RANK", "0") == "0"
    if not launching:
        signals.install()
        _watch_env_steps(signals)
    plan = None
    try:
        if "WORLD_SIZE" in os.environ:  # started by torchrun: one rank of a group
            status = _run_as_rank(args, signals)
            if status is not None:
                return status
        planned = _planned(args)
        if planned is None:
            return EXIT_USAGE
        if isinstance(planned, int):  # the env failed at start, said so
            return planned
        plan = planned
        if signals.stop_requested:  # taken while the run was planned (a slow env's probe)
            kept = "the run is as it was" if plan.payload or plan.restart else "nothing was created"
            print(f"operant-train: stopped by {signals.name} before training began; {kept}")
            return EXIT_OK
        if launching:
            from operant.launch import launch

            say_notes(plan)
            plan.release()  # the background trainer takes the run's lock itself
            return launch(
                sys.argv[1:] if argv is None else argv, plan.root, plan.run_id, monitor=args.monitor
            )
        return _trained(args, plan, signals)
    except KeyboardInterrupt:
        print(_interrupted_line(plan), file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        if argv is None and signals.settled:
            # operant-train's process, its run's outcome written (a finished or stopped run:
            # exit 0), is ending (torch's teardown takes about half a second): a Ctrl-C now
            # ends it at once, still with 0, rather than turning the clean stop into 130.
            # SIGINT goes from the settled handler (which ignores it) straight to this one:
            # restored first, a Ctrl-C in between killed the process (seen in CI).
            signals.restore(keep=(signal.SIGINT,))
            signal.signal(signal.SIGINT, lambda signum, frame: os._exit(EXIT_OK))
            # The interpreter's finalization resets a Python handler to SIG_DFL (a Ctrl-C in
            # the teardown after it killed the process: -2, seen in CI), but leaves SIG_IGN:
            # ignored from the first exit hook on (registered last, so it runs first).
            atexit.register(signal.signal, signal.SIGINT, signal.SIG_IGN)
        else:
            signals.restore()
        if not launching:
            from operant.envs.reference import step_deadline

            step_deadline.watch_stops(None)
        if plan is not None:
            plan.release()


def _refuse_or_hand_off(args: Any, argv: list[str] | None, launching: bool) -> int | None:
    """The exit status where the flags are refused or torchrun takes over (--nproc-per-node
    in the foreground); None where this process goes on to train or launch."""
    from operant.trainer.distributed import handoff

    problem = _flag_problem(args)
    if problem is None and handoff.wanted(args):
        problem = handoff.refusal(args, _flag_values(args))
        if problem is None and not launching:  # else the background operant-train hands off
            return handoff.hand_off(args, sys.argv[1:] if argv is None else argv)
    if problem is not None:
        print(f"operant-train: {problem}", file=sys.stderr)
        return EXIT_USAGE
    return None


def _planned(args: Any) -> Any:
    """The run's plan, checked against what this machine offers (device, the env's packages,
    memory) before anything is created or launched; None, said why, for bad input; the exit
    status, said why, where the user's env fails while it is built."""
    # Heavy imports after argument parsing, so --help and usage errors are instant.
    from operant.envs import EnvError, EnvFailedError
    from operant.envs.reference import step_deadline
    from operant.shared import runs
    from operant.trainer.checkpoint.resume import ResumeError, plan_run
    from operant.trainer.config import ConfigError
    from operant.trainer.run import preflight

    plan = None
    try:
        plan = plan_run(args.resume, args.config, args.overrides, _flag_values(args))
        step_deadline.set_grace(plan.config.env.stop_grace_s)  # the probe's, the build's
        plan.settle(preflight.check(plan.config, plan.impl).agents_per_env)
        if plan.config.train.tensorboard:
            from operant.trainer.services import tensorboard

            tensorboard.require()
    except (ConfigError, EnvError, ResumeError, runs.RunNotFoundError) as error:
        where = plan.run_dir if plan is not None else _resumed_dir(args)
        print(f"operant-train: {runs.where_started(error, where)}", file=sys.stderr)
        if plan is not None:
            plan.release()  # a resumed run's lock
        return None
    except EnvFailedError as error:  # the user's env, built by preflight's probe
        from operant.trainer.run.console import env_failed_at_start

        if plan is None:
            raise
        env_failed_at_start(plan, error)
        plan.release()
        return EXIT_FAILED
    return plan


def say_notes(plan: Any) -> None:
    """What the plan changed from the config (a budget rounded to whole updates), said once
    the run is sure to start: before a refusal it made two lines of one mistake."""
    for note in plan.notes:
        print(f"operant-train: {note}", file=sys.stderr, flush=True)


def _resumed_dir(args: Any) -> Any:
    """The directory of the run `--resume` names, where there is one (for a message about
    the run, when its plan could not be made)."""
    from operant.shared import runs

    if not args.resume:
        return None
    try:
        root = runs.runs_root(args.runs_dir)
        return runs.resolve_run(root, None if args.resume == runs.LATEST_NAME else args.resume)
    except (OSError, ValueError, runs.RunNotFoundError):
        return None


def _trained(args: Any, plan: Any, signals: Any) -> int:
    from operant.envs import EnvError
    from operant.trainer.config import ConfigError
    from operant.trainer.run import session

    try:
        return session.run(args, plan, signals)
    except (ConfigError, EnvError) as error:
        # What only the built env can tell (its specs against policy.kind and
        # normalize.obs) is refused while the trainer is built, before the run starts.
        from operant.shared import runs

        print(f"operant-train: {runs.where_started(error, plan.run_dir)}", file=sys.stderr)
        return EXIT_USAGE


def _interrupted_line(plan: Any) -> str:
    """The line for a second Ctrl-C that landed outside the session's own handler (while the
    stop's checkpoint was written or the run torn down): the run's last checkpoint and its
    directory where the run has one, as the session's line names them."""
    line = "operant-train: interrupted"
    if plan is None:
        return line
    run_dir = plan.run_dir or plan.root / plan.run_id
    if not run_dir.is_dir():
        return line
    last = None
    if "torch" in sys.modules:  # the checkpoint module needs it; never imported only for this
        from operant.shared import runs
        from operant.trainer.checkpoint import store as checkpoint
        from operant.trainer.checkpoint.file_format import CheckpointError

        try:
            last = checkpoint.find_checkpoint(run_dir / runs.CHECKPOINT_DIR)
        except CheckpointError:
            last = None
    if last is not None:
        return f"{line}; the last checkpoint is {last}; run directory {run_dir}"
    from operant.trainer.checkpoint.resume import resume_hint

    again = resume_hint(plan.run_id, run_dir.parent, auto=True)
    return (
        f"{line}; there is no checkpoint; run directory {run_dir}; start it again (with the "
        f"config it started with): {again}"
    )


if __name__ == "__main__":
    sys.exit(main())
