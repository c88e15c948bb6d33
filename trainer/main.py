"""`operant-train`: headless PPO training.

Exit codes:
  0  training finished (budget spent, or train.target_return reached)
  1  training failed (an error or a non-finite loss; the run directory says why)
  2  bad input: flags, config file, config values, env id (nothing was started)
  130  interrupted by SIGINT (Ctrl-C); the metrics file says finished, interrupted
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any, TextIO

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (plus the usage hint) and exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"operant-train: {message} (see operant-train --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="operant-train",
        description="Train a policy with PPO, headless. Config: defaults < --config FILE < "
                    "dedicated flags < --set section.key=value.",
        epilog="Exit codes: 0 finished, 1 training failed, 2 bad input.")
    parser.add_argument("--config", metavar="FILE.toml", help="TOML config file")
    parser.add_argument("--set", dest="overrides", metavar="KEY=VALUE", action="append",
                        default=[], help="override one config value, e.g. ppo.learning_rate=1e-3")
    parser.add_argument("--env", help="environment id (env.id), e.g. CartPole-v1")
    parser.add_argument("--total-steps", type=int, metavar="N", help="train.total_steps")
    parser.add_argument("--seed", type=int, metavar="S", help="train.seed")
    parser.add_argument("--runs-dir", metavar="DIR", help="runs root (train.runs_dir)")
    parser.add_argument("--run-id", metavar="ID", help="run directory name (train.run_id)")
    parser.add_argument("--log-format", choices=("plain", "json"), default="plain",
                        help="plain: one compact line per update; json: one JSON object per line")
    parser.add_argument("--quiet", action="store_true", help="no progress lines, only the summary")
    parser.add_argument("--detach", action="store_true",
                        help="train in the background (log in the run directory), print the run id")
    parser.add_argument("--monitor", action="store_true",
                        help="train in the background and watch it here (q detaches)")
    return parser


def _flag_values(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    extra: dict[str, dict[str, Any]] = {}
    for value, section, key in ((args.env, "env", "id"), (args.total_steps, "train", "total_steps"),
                                (args.seed, "train", "seed"), (args.runs_dir, "train", "runs_dir"),
                                (args.run_id, "train", "run_id")):
        if value is not None:
            extra.setdefault(section, {})[key] = value
    return extra


def _fmt(value: Any, spec: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return format(value, spec)


def plain_line(record: dict[str, Any], total_updates: int) -> str:
    return (f"update {record['update']}/{total_updates}  step {record['global_step']:,}  "
            f"sps {record['sps']:,.0f}  return {_fmt(record['episode_return_mean'], '.1f')}  "
            f"episodes {record['episodes']:,}  "
            f"pg {_fmt(record.get('policy_loss'), '.4f')}  vf {_fmt(record.get('value_loss'), '.3f')}  "
            f"ent {_fmt(record.get('entropy'), '.3f')}  kl {_fmt(record.get('approx_kl'), '.4f')}  "
            f"clip {_fmt(record.get('clip_fraction'), '.3f')}  t {record['elapsed_s']:.1f}s")


class ProgressLog:
    """Every update to progress.jsonl; every `log_every`-th to stdout, plain or JSON."""

    def __init__(self, path: Path, out: TextIO, fmt: str, every: int, total_updates: int,
                 quiet: bool):
        self.file = open(path, "a", buffering=1)
        self.out, self.fmt, self.every, self.total, self.quiet = out, fmt, every, total_updates, quiet

    def __call__(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, separators=(",", ":"))
        self.file.write(line + "\n")
        if self.quiet or (record["update"] % self.every and not record.get("solved")):
            return
        text = line if self.fmt == "json" else plain_line(record, self.total)
        print(text, file=self.out, flush=True)

    def close(self) -> None:
        self.file.close()


def _fan_out(progress: ProgressLog, publisher) -> Any:
    if publisher is None:
        return progress

    def log(record: dict[str, Any]) -> None:
        publisher.publish(record)
        progress(record)

    return log


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Heavy imports after argument parsing, so --help and usage errors are instant.
    from operant.shared import runs
    from operant.trainer.config import ConfigError, derive, load_config
    from operant.trainer.envs import EnvError

    try:
        config = load_config(args.config, args.overrides, _flag_values(args))
        derived = derive(config)
        from operant.trainer.envs import resolve_impl

        impl = resolve_impl(config.env.id, config.env.impl)
    except (ConfigError, EnvError) as error:
        print(f"operant-train: {error}", file=sys.stderr)
        return EXIT_USAGE

    root = runs.runs_root(config.train.runs_dir)
    run_id = config.train.run_id or runs.make_run_id(config.env.id)
    if args.detach or args.monitor:
        from operant.monitor.launch import launch

        return launch(sys.argv[1:] if argv is None else argv, root, run_id, monitor=args.monitor)
    from operant.trainer.train import Trainer, run_metadata, write_json_atomic
    try:
        run_dir = runs.create_run_dir(root, run_id)
    except FileExistsError:
        print(f"operant-train: run {run_id!r} already exists under {root}; choose another "
              "--run-id", file=sys.stderr)
        return EXIT_USAGE
    except (OSError, ValueError) as error:
        print(f"operant-train: cannot create the run directory under {root}: {error}",
              file=sys.stderr)
        return EXIT_USAGE

    progress = ProgressLog(run_dir / runs.PROGRESS_FILE, sys.stdout, args.log_format,
                           config.train.log_every, derived.num_updates, args.quiet)
    publisher = None
    try:
        trainer = Trainer(config, run_dir=run_dir)
        write_json_atomic(run_dir / runs.RUN_FILE, run_metadata(config, run_id, trainer.impl))
        if config.train.publish_metrics:
            from operant.trainer.telemetry import Publisher

            # The metrics file appears complete (os.replace), then `latest` points at it.
            publisher = Publisher(run_dir / runs.METRICS_FILE, run_id, config.env.id,
                                  trainer.impl, config.train.device, config.train.total_steps)
        runs.update_latest(root, run_id)
        trainer.log = _fan_out(progress, publisher)
        if args.log_format == "plain" and not args.quiet:
            print(f"run {run_id}: {config.env.id} ({trainer.impl}), {config.env.num_envs} envs, "
                  f"{derived.num_updates} updates of {derived.batch_size} steps -> {run_dir}",
                  flush=True)
        if publisher is not None:
            publisher.start()
        started = time.perf_counter()
        last = trainer.run()
        trainer.save_model(run_dir / "model.pt")
        if publisher is not None:
            publisher.finish()
    except FloatingPointError as error:
        if publisher is not None:
            publisher.fail(f"non-finite values: {error}")
        print(f"operant-train: training failed: {error}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        if publisher is not None:
            publisher.finish(interrupted=True, reason="interrupted by SIGINT")
        print(f"operant-train: interrupted; run directory {run_dir}", file=sys.stderr)
        return 130
    except BaseException as error:
        if publisher is not None:
            publisher.fail(f"{type(error).__name__}: {error}")
        raise
    finally:
        progress.close()
        if publisher is not None:
            publisher.close()
    summary = {
        "run_id": run_id, "global_step": last.get("global_step", 0),
        "episode_return_mean": last.get("episode_return_mean"),
        "elapsed_s": round(time.perf_counter() - started, 3),
        "sps_mean": last.get("sps_mean"), "solved_at_s": trainer.solved_at,
        "run_dir": str(run_dir),
    }
    if args.log_format == "json":
        print(json.dumps({"summary": summary}), flush=True)
    else:
        solved = (f", solved in {trainer.solved_at:.2f}s" if trainer.solved_at is not None else "")
        print(f"done: {summary['global_step']:,} steps in {summary['elapsed_s']:.1f}s "
              f"({_fmt(summary['sps_mean'], ',.0f')} steps/s), mean return of the last 100 "
              f"episodes {_fmt(summary['episode_return_mean'], '.1f')}{solved} -> {run_dir}",
              flush=True)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
