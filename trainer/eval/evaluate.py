"""`operant eval RUN|MODEL|CHECKPOINT`: run a trained policy and report its episode returns.

What it evaluates, named any of these ways:
- a run: its id, `latest`, or its directory. Its last policy by default: `model.pt`, written
  when the run finished, or its newest checkpoint when that is newer (a run stopped by
  SIGTERM or Ctrl-C writes a checkpoint and no model.pt; a finished run resumed and stopped
  again has an older model.pt). `--best` picks `best.pt` instead: the best policy the run saw,
  by the mean return of its last 100 episodes;
- a model file: `model.pt`, `best.pt`, or any file in their format (the policy's weights,
  the run's config, the normalisers' statistics);
- a checkpoint file (`checkpoints/ckpt-*.pt`): its policy and normalisers, checked against
  its digest.

The policy acts greedily by default (argmax, or the Gaussian's mean); `--stochastic` samples
as in training. Observation normalisation saved with the policy is applied. Exit codes: 0 ok,
2 bad input (a run, file or flag that names no usable policy: one line says why).

Episodes end where the env ends them, or at its time limit (CartPole's 500 steps, a config's
`env.max_episode_steps`, `--max-episode-steps N`). An env with no limit of its own (MinAtar's
games) is cut at EVAL_STEP_LIMIT steps unless told otherwise: a greedy policy can otherwise
play one episode forever (a Seaquest sub that never leaves the surface never runs out of
oxygen). The report says how many episodes a limit cut.

`--video out.mp4` (or .gif, .webm, ...) records the episodes instead on one env, every frame of
every episode (operant.trainer.eval.video), and reports those episodes' returns.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from operant.shared.cli_parser import OneLineParser
from operant.trainer.config import MAX_SEED
from operant.trainer.eval.load import EvalInputError, LoadedPolicy, resolve
from operant.trainer.run.errors import counted, load_error_line

EXIT_OK, EXIT_USAGE = 0, 2
EVAL_STEP_LIMIT = 27_000
"""Steps after which eval cuts an episode of an env with no time limit of its own (Atari's
customary 108,000 frames at a frame skip of 4)."""


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="operant eval", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "target",
        metavar="RUN|MODEL|CHECKPOINT",
        help="a run id, 'latest', a run directory, a model file (model.pt, "
        "best.pt) or a checkpoint (checkpoints/ckpt-*.pt)",
    )
    parser.add_argument(
        "--best", action="store_true", help="a run's best policy (best.pt) instead of its last one"
    )
    parser.add_argument(
        "--episodes", type=int, default=100, help="episodes to finish (default 100)"
    )
    parser.add_argument("--num-envs", type=int, default=16, help="envs stepped together")
    parser.add_argument("--seed", type=int, default=12345, help="env seed")
    parser.add_argument(
        "--stochastic", action="store_true", help="sample actions instead of greedy"
    )
    parser.add_argument(
        "--max-episode-steps",
        type=int,
        metavar="N",
        help="cut episodes at N steps (default: the env's own limit; "
        f"{EVAL_STEP_LIMIT:,} for an env without one, such as MinAtar's games)",
    )
    parser.add_argument("--runs-dir", help="runs root, to resolve a run id")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--video",
        metavar="FILE.mp4|FILE.gif",
        help="record the episodes (on one env) to a video file; needs the "
        'video extra: pip install "operant-rl[video]"',
    )
    return parser


def _limit_source(args: Any, config: Any, options: dict[str, Any]) -> str:
    """Whose the episodes' step limit is: the flag's, the run's config's, eval's (for an env
    without one: build_policy's EVAL_STEP_LIMIT) or the env's own; how to set another."""
    if args.max_episode_steps is not None:
        return "--max-episode-steps"
    if config.env.max_episode_steps is not None:
        whose = "the run's env.max_episode_steps"
    elif "max_episode_steps" in options:
        whose = "eval's, for an env without a time limit"
    else:
        whose = "the env's time limit"
    return f"{whose}; --max-episode-steps sets another"


def _run_dir(path: Path) -> Path | None:
    """The run a model or checkpoint file belongs to (the folder with run.json), if any."""
    from operant.shared import runs

    return next((folder for folder in path.parents[:2] if (folder / runs.RUN_FILE).is_file()), None)


def build_policy(
    loaded: LoadedPolicy, num_envs: int, max_episode_steps: int | None = None
) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
    """(config, env, policy, observation normaliser or None, the env's make_env keywords) for
    a loaded policy; the policy comes from the trainer's registry, chosen by the env's specs as
    in training. The env's time limit: `max_episode_steps`, else its config's or its own, else
    EVAL_STEP_LIMIT."""
    import msgspec

    from operant.envs import EnvError
    from operant.envs.contract import DeclaresTimeLimit
    from operant.shared import runs
    from operant.trainer.config import Config, ConfigError, build_env, env_kwargs
    from operant.trainer.loop.normalize import ObservationNormalizer
    from operant.trainer.policies.registry import build_policy as build_registered_policy

    try:
        config = msgspec.convert(loaded.config, Config)
    except msgspec.ValidationError as error:
        raise EvalInputError(
            f"{loaded.path}: its config does not fit this operant ({error}); "
            "evaluate it with the operant version that trained it"
        ) from None
    options = env_kwargs(config)
    if max_episode_steps is not None:
        options["max_episode_steps"] = max_episode_steps
    try:
        env = build_env(config, num_envs, **options)
        unlimited = isinstance(env, DeclaresTimeLimit) and env.time_limit is None
        if "max_episode_steps" not in options and unlimited:
            env.close()
            options["max_episode_steps"] = EVAL_STEP_LIMIT
            env = build_env(config, num_envs, **options)
        policy = build_registered_policy(config, env.obs_spec, env.act_spec)
    except (EnvError, ConfigError) as error:
        raise EvalInputError(runs.where_started(error, _run_dir(loaded.path))) from None
    except MemoryError:
        raise EvalInputError(
            f"--num-envs {num_envs}: this machine has not the memory for so many envs; give fewer"
        ) from None
    normalizer = None
    try:
        policy.load_state_dict(loaded.policy)
        if loaded.obs_normalizer is not None:
            normalizer = ObservationNormalizer(env.obs_spec.shape, config.normalize.clip_obs)
            normalizer.load_state_dict(loaded.obs_normalizer)
    except (RuntimeError, KeyError, ValueError) as error:
        raise EvalInputError(
            f"{loaded.path}: its weights do not fit its own config ({load_error_line(error)})"
        ) from None
    # Dropout off, BatchNorm on its running statistics: a trained network as it is evaluated
    # (CleanRL's own evaluation does the same); the trainer's own policies have neither.
    policy.eval()
    return config, env, policy, normalizer, options


def episode_limit(env: Any, options: dict[str, Any]) -> int | None:
    """The step limit the episodes were cut at: eval's own, else the env's (CartPole's 500; a
    Gymnasium env's registration's, through the reference face)."""
    from operant.envs.contract import DeclaresTimeLimit

    limit = options.get("max_episode_steps")
    if limit is not None:
        return limit
    own = env.time_limit if isinstance(env, DeclaresTimeLimit) else None
    return own or (env.spec and env.spec.max_episode_steps)


def play(
    env: Any, policy: Any, normalizer: Any, episodes: int, seed: int, stochastic: bool
) -> tuple[list[float], list[bool] | None]:
    """Returns of `episodes` episodes, and which of them a time limit cut (None where the
    env's statistics do not line up with its rows: agents as rows). Env i contributes its
    first (episodes + i) // num_envs, as SB3's evaluate_policy counts them: the first
    `episodes` to finish over many envs are the short ones (256 envs read 292 where one env
    read 406 for the same CartPole policy)."""
    import torch

    act_spec = env.act_spec
    generator = torch.Generator().manual_seed(seed)
    env.reset(seed=seed)
    env.drain_episode_stats()
    obs = env.obs if isinstance(env.obs, torch.Tensor) else torch.from_numpy(env.obs)
    actions = (
        env.actions if isinstance(env.actions, torch.Tensor) else torch.from_numpy(env.actions)
    )
    tally = _Tally(env, episodes)
    with torch.inference_mode():
        while not tally.done():
            seen = obs if normalizer is None else normalizer(obs)
            chosen = policy.act(seen, generator)[0] if stochastic else policy.greedy(seen)
            if not act_spec.discrete:
                chosen = torch.clamp(
                    chosen, torch.as_tensor(act_spec.low), torch.as_tensor(act_spec.high)
                )
            actions.copy_(chosen)
            env.step_bound()
            finished = env.drain_episode_stats().episodes
            if finished:
                tally.add(env, finished)
    return tally.returns[:episodes], None if tally.cut is None else tally.cut[:episodes]


class _Tally:
    """The episodes `play` keeps: row i's first (episodes + i) // rows while the statistics
    line up with the rows (an episode for each row that ended), else, from the first step
    where they do not, the first `episodes` to finish."""

    def __init__(self, env: Any, episodes: int):
        rows = env.layout.num_rows  # the BatchEnv contract's (a family env may have no num_envs)
        self.episodes = episodes
        self.quota: list[int] | None = [(episodes + i) // rows for i in range(rows)]
        self.counts = [0] * rows
        self.returns: list[float] = []
        self.cut: list[bool] | None = []

    def done(self) -> bool:
        if self.quota is None:
            return len(self.returns) >= self.episodes
        return self.counts == self.quota

    def add(self, env: Any, finished: int) -> None:
        """This step's `finished` episodes (their returns in env order, as the statistics
        record them)."""
        import torch

        values = env.recent_returns(finished).tolist()
        terminated, truncated = torch.as_tensor(env.terminated), torch.as_tensor(env.truncated)
        rows = torch.nonzero(terminated | truncated).flatten().tolist()
        if self.quota is None or len(rows) != finished:
            self.returns.extend(values)
            self.cut = None
            self.quota = None
            return
        flags = (truncated & ~terminated)[rows].tolist()
        for row, value, was_cut in zip(rows, values, flags):
            if self.counts[row] < self.quota[row]:
                self.counts[row] += 1
                self.returns.append(value)
                assert self.cut is not None
                self.cut.append(was_cut)


def _argument_error(args: argparse.Namespace) -> str | None:
    """What is wrong with the command line's numbers, or None when nothing is."""
    if args.episodes < 1 or args.num_envs < 1:
        return "--episodes and --num-envs must be at least 1"
    if not 0 <= args.seed <= MAX_SEED:
        return f"--seed must be between 0 and 2**62, got {args.seed}"
    if args.max_episode_steps is not None and args.max_episode_steps < 1:
        return "--max-episode-steps must be at least 1"
    return None


def _record_video(
    args: argparse.Namespace, config: Any, env: Any, policy: Any, normalizer: Any, options: Any
) -> tuple[list[float], list[bool], dict[str, Any]]:
    """Record the episodes to --video, closing `env` (the recorder builds its own env). Returns
    the returns, which episodes were cut, and the video's fields for the result. Raises
    EvalInputError where the recorder cannot record."""
    from operant.trainer.eval.video import record

    env.close()
    returns, cut, frames = record(
        config,
        policy,
        normalizer,
        args.episodes,
        args.seed,
        args.stochastic,
        Path(args.video).expanduser(),
        options,
    )
    return returns, cut, {"video": str(Path(args.video).expanduser()), "video_frames": frames}


def _result(
    args: argparse.Namespace,
    loaded: Any,
    config: Any,
    returns: list[float],
    cut: list[bool] | None,
    limit: int | None,
    video: dict[str, Any],
) -> dict[str, Any]:
    """The --json object: what was evaluated, how, and the returns' statistics."""
    import numpy as np

    return {
        "model": str(loaded.path),
        "kind": loaded.kind,
        "global_step": loaded.global_step,
        "env_id": config.env.id,
        "episodes": len(returns),
        "return_mean": float(np.mean(returns)),
        "return_std": float(np.std(returns)),
        "return_min": float(np.min(returns)),
        "return_max": float(np.max(returns)),
        "greedy": not args.stochastic,
        "max_episode_steps": limit,
        "episodes_cut": None if cut is None else sum(cut),
        **video,
    }


def _print_summary(
    args: argparse.Namespace,
    loaded: Any,
    config: Any,
    options: Any,
    result: dict[str, Any],
    limit: int | None,
) -> None:
    """The human-readable result: returns, episodes cut at a limit, and the video written."""
    step = f" at step {loaded.global_step:,}" if loaded.global_step is not None else ""
    print(
        f"{config.env.id}: {counted(result['episodes'], 'episode')}, return "
        f"{result['return_mean']:.1f} ± {result['return_std']:.1f} (min "
        f"{result['return_min']:.1f}, max {result['return_max']:.1f}), "
        f"{'greedy' if not args.stochastic else 'stochastic'}; {loaded.kind} {loaded.path}{step}"
    )
    if result["episodes_cut"] and limit is not None:
        cut, whose = result["episodes_cut"], _limit_source(args, config, options)
        print(f"{cut} of them cut at the {limit:,}-step limit ({whose})")
    elif result["episodes_cut"]:
        print(f"{result['episodes_cut']} of them reached the env's time limit")
    if "video" in result:
        print(f"video: {result['video']} ({result['video_frames']} frames)")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    problem = _argument_error(args)
    if problem is not None:
        print(f"operant eval: {problem}", file=sys.stderr)
        return EXIT_USAGE
    from operant.trainer.eval.video import check_video

    try:
        if args.video is not None:
            check_video(Path(args.video).expanduser())
        loaded = resolve(args.target, args.runs_dir, args.best)
        config, env, policy, normalizer, options = build_policy(
            loaded, args.num_envs, args.max_episode_steps
        )
    except EvalInputError as error:
        print(f"operant eval: {error}", file=sys.stderr)
        return EXIT_USAGE
    if not args.stochastic and not getattr(policy, "has_greedy", True):
        env.close()
        print(
            f"operant eval: the run's policy ({config.policy.kind}) has no greedy(obs) for its "
            "continuous actions: add --stochastic, or give it a greedy(obs) returning the mean",
            file=sys.stderr,
        )
        return EXIT_USAGE
    import torch

    if config.train.torch_threads:
        # the run's own setting, as the trainer's: torch's default of one thread a core
        # crawled on a busy machine (3.7x slower than one)
        torch.set_num_threads(config.train.torch_threads)
    video: dict[str, Any] = {}
    cut: list[bool] | None
    if args.video is not None:
        try:
            returns, cut, video = _record_video(args, config, env, policy, normalizer, options)
        except EvalInputError as error:
            print(f"operant eval: {error}", file=sys.stderr)
            return EXIT_USAGE
    else:
        returns, cut = play(env, policy, normalizer, args.episodes, args.seed, args.stochastic)
    limit = episode_limit(env, options)
    result = _result(args, loaded, config, returns, cut, limit, video)
    if args.json:
        print(json.dumps(result))
        return EXIT_OK
    _print_summary(args, loaded, config, options, result, limit)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
