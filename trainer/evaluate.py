"""`operant eval MODEL`: run a trained policy and report its episode returns.

MODEL is a run's `model.pt`, a run directory, or a run id (then `model.pt` of that run under
the runs root). The policy acts greedily by default (argmax, or the Gaussian's mean);
`--stochastic` samples as in training. Observation normalisation saved with the model is
applied. Exit codes: 0 ok, 2 bad input (missing or unreadable model).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

EXIT_OK, EXIT_USAGE = 0, 2
MODEL_FILE = "model.pt"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"operant eval: {message} (see operant eval --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="operant eval", description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="model.pt, a run directory, a run id, or 'latest'")
    parser.add_argument("--episodes", type=int, default=100, help="episodes to finish (default 100)")
    parser.add_argument("--num-envs", type=int, default=16, help="envs stepped together")
    parser.add_argument("--seed", type=int, default=12345, help="env seed")
    parser.add_argument("--stochastic", action="store_true", help="sample actions instead of greedy")
    parser.add_argument("--runs-dir", help="runs root, to resolve a run id")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def _model_path(text: str, runs_dir: str | None) -> Path:
    from operant.shared import runs

    path = Path(text)
    if path.is_file():
        return path
    if path.is_dir():
        return path / MODEL_FILE
    return runs.resolve_run(runs.runs_root(runs_dir), text) / MODEL_FILE


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.episodes < 1 or args.num_envs < 1:
        print("operant eval: --episodes and --num-envs must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    import pickle

    import msgspec
    import numpy as np
    import torch

    from operant.shared.runs import RunNotFoundError
    from operant.trainer.config import Config, ConfigError
    from operant.trainer.envs import EnvError, make_env
    from operant.trainer.normalize import ObservationNormalizer
    from operant.trainer.policies import build_policy

    try:
        path = _model_path(args.model, args.runs_dir)
        model = torch.load(path, map_location="cpu", weights_only=True)
        config = msgspec.convert(model["config"], Config)
    except RunNotFoundError as error:
        print(f"operant eval: {error}", file=sys.stderr)
        return EXIT_USAGE
    except FileNotFoundError:
        print(f"operant eval: no model at {path}: train first, or name a model.pt", file=sys.stderr)
        return EXIT_USAGE
    except (OSError, RuntimeError, KeyError, TypeError, pickle.UnpicklingError,
            msgspec.ValidationError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        print(f"operant eval: {path} is not an operant model ({first})", file=sys.stderr)
        return EXIT_USAGE
    try:
        env = make_env(config.env.id, args.num_envs, impl=config.env.impl, copy=False)
    except EnvError as error:
        print(f"operant eval: {error}", file=sys.stderr)
        return EXIT_USAGE
    act_spec = env.act_spec
    continuous = not act_spec.discrete
    try:
        policy = build_policy(config, env.obs_spec, act_spec)
    except ConfigError as error:
        print(f"operant eval: {error}", file=sys.stderr)
        return EXIT_USAGE
    policy.load_state_dict(model["policy"])
    normalizer = None
    if "obs_normalizer" in model:
        normalizer = ObservationNormalizer(env.obs_spec.shape, config.normalize.clip_obs)
        normalizer.load_state_dict(model["obs_normalizer"])
    generator = torch.Generator().manual_seed(args.seed)
    env.reset(seed=args.seed)
    env.drain_episode_stats()
    obs = env.obs if isinstance(env.obs, torch.Tensor) else torch.from_numpy(env.obs)
    actions = env.actions if isinstance(env.actions, torch.Tensor) else torch.from_numpy(env.actions)
    returns: list[float] = []
    with torch.inference_mode():
        while len(returns) < args.episodes:
            seen = obs if normalizer is None else normalizer(obs)
            chosen = policy.act(seen, generator)[0] if args.stochastic else policy.greedy(seen)
            if continuous:
                chosen = torch.clamp(chosen, torch.as_tensor(act_spec.low),
                                     torch.as_tensor(act_spec.high))
            actions.copy_(chosen)
            env.step_bound()
            finished = env.drain_episode_stats().episodes
            if finished:
                returns.extend(env.recent_returns(finished).tolist())
    returns = returns[:args.episodes]
    result = {"model": str(path), "env_id": config.env.id, "episodes": len(returns),
              "return_mean": float(np.mean(returns)), "return_std": float(np.std(returns)),
              "return_min": float(np.min(returns)), "return_max": float(np.max(returns)),
              "greedy": not args.stochastic}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{config.env.id}: {len(returns)} episodes, return {result['return_mean']:.1f} "
              f"± {result['return_std']:.1f} (min {result['return_min']:.1f}, max "
              f"{result['return_max']:.1f}), {'greedy' if not args.stochastic else 'stochastic'}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
