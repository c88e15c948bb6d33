# Over 400 lines: `operant eval` end to end (load, play, record video): one command, one flow.
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

`--video out.mp4` (or .gif, .webm, ...) records the episodes instead on one env drawn by
Gymnasium's renderer (operant.envs.render), every frame of every episode, the terminal one
included (the env autoresets NEXT_STEP), and reports those episodes' returns. Frames stream
to the file through imageio (GIF through pillow, other formats through imageio-ffmpeg's own
ffmpeg binary): the `video` extra, `pip install "operant-rl[video]"`. Gymnasium's RecordVideo
writes through moviepy, which itself writes through imageio-ffmpeg; imageio alone is the
smaller dependency and also writes GIFs without ffmpeg.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_USAGE = 0, 2
MODEL_FILE = "model.pt"
BEST_FILE = "best.pt"


class EvalInputError(Exception):
    """Input that names no usable policy; the message is one line saying what to do."""


@dataclass
class LoadedPolicy:
    """A policy to evaluate, whichever file it came from."""

    path: Path
    kind: str
    """model (model.pt, best.pt) or checkpoint."""
    config: dict[str, Any]
    policy: dict[str, Any]
    """The policy's state dict."""
    obs_normalizer: dict[str, Any] | None
    global_step: int | None


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"operant eval: {message} (see operant eval --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="operant eval", description=__doc__.split("\n\n")[0])
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
    parser.add_argument("--runs-dir", help="runs root, to resolve a run id")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--video",
        metavar="FILE.mp4|FILE.gif",
        help="record the episodes (on one env) to a video file; needs the "
        'video extra: pip install "operant-rl[video]"',
    )
    return parser


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def load_policy_file(path: Path) -> LoadedPolicy:
    """A model file or a checkpoint, told apart by content, not by name."""
    import torch

    from operant.trainer import checkpoint

    try:
        with warnings.catch_warnings():
            # torch warns about a foreign pickle before refusing it: the refusal says it all.
            warnings.simplefilter("ignore")
            payload = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise EvalInputError(f"{path}: no such file") from None
    except Exception as error:  # any failure to parse an untrusted file: it is not ours
        raise EvalInputError(
            f"{path} is not an operant model or checkpoint ({_first_line(error)})"
        ) from None
    if isinstance(payload, dict) and payload.get("format") == checkpoint.FORMAT:
        try:
            payload = checkpoint.load(path)  # again, with its version and digest checked
        except checkpoint.CheckpointError as error:
            raise EvalInputError(str(error)) from None
        state = payload["trainer"]
        return LoadedPolicy(
            path,
            "checkpoint",
            payload["config"],
            state["policy"],
            state.get("obs_normalizer"),
            int(state["counters"]["global_step"]),
        )
    if not (
        isinstance(payload, dict)
        and isinstance(payload.get("policy"), dict)
        and isinstance(payload.get("config"), dict)
    ):
        raise EvalInputError(
            f"{path} is not an operant model or checkpoint (it holds no policy and config)"
        )
    step = payload.get("global_step")
    return LoadedPolicy(
        path,
        "model",
        payload["config"],
        payload["policy"],
        payload.get("obs_normalizer"),
        int(step) if step is not None else None,
    )


def _batch_size(config: dict[str, Any]) -> int:
    from operant.trainer.config import EnvConfig, PPOConfig

    env, ppo = config.get("env", {}), config.get("ppo", {})
    return int(env.get("num_envs", EnvConfig().num_envs)) * int(
        ppo.get("num_steps", PPOConfig().num_steps)
    )


def load_run_policy(run_dir: Path, best: bool) -> LoadedPolicy:
    """A run's best policy, or its last: model.pt or the newest checkpoint, whichever holds
    the later update (model.pt when they hold the same)."""
    from operant.shared import runs
    from operant.trainer import checkpoint

    if best:
        if not (run_dir / BEST_FILE).is_file():
            raise EvalInputError(
                f"run {run_dir.name!r} has no {BEST_FILE}; leave out --best "
                "to evaluate its last policy"
            )
        return load_policy_file(run_dir / BEST_FILE)
    checkpoints = checkpoint.checkpoint_files(run_dir / runs.CHECKPOINT_DIR)
    newest = checkpoints[-1] if checkpoints else None
    if not (run_dir / MODEL_FILE).is_file():
        if newest is None:
            raise EvalInputError(
                f"{run_dir} holds no {MODEL_FILE} and no checkpoint: a run writes a checkpoint "
                "when it is stopped, on SIGUSR1, every checkpoint.every_seconds, and "
                f"{MODEL_FILE} when it finishes"
            )
        return load_policy_file(newest)
    model = load_policy_file(run_dir / MODEL_FILE)
    if newest is None or model.global_step is None:
        return model
    model_update = model.global_step // _batch_size(model.config)
    return load_policy_file(newest) if checkpoint.update_of(newest) > model_update else model


def resolve(target: str, runs_dir: str | None, best: bool) -> LoadedPolicy:
    """What `operant eval TARGET` evaluates (see the module docstring)."""
    from operant.shared import runs

    path = Path(target).expanduser()
    if path.is_dir():
        run_dir = path.parent if path.name == runs.CHECKPOINT_DIR else path
        return load_run_policy(run_dir, best)
    if path.exists():
        if best:
            raise EvalInputError(
                f"--best picks a run's {BEST_FILE}: name the run (its id, "
                f"'latest' or its directory), not the file {path}"
            )
        return load_policy_file(path)
    if "/" in target or target.endswith(".pt"):
        raise EvalInputError(f"{path}: no such file")
    try:
        run_dir = runs.resolve_run(runs.runs_root(runs_dir), target)
    except runs.RunNotFoundError as error:
        raise EvalInputError(str(error)) from None
    return load_run_policy(run_dir, best)


def build_policy(loaded: LoadedPolicy, num_envs: int) -> tuple[Any, Any, Any, Any]:
    """(config, env, policy, observation normaliser or None) for a loaded policy; the policy
    comes from the trainer's registry, chosen by the env's specs as in training."""
    import msgspec

    from operant.envs import EnvError, make_env
    from operant.trainer.config import Config, ConfigError, env_kwargs
    from operant.trainer.normalize import ObservationNormalizer
    from operant.trainer.policies import build_policy as build_registered_policy

    try:
        config = msgspec.convert(loaded.config, Config)
    except msgspec.ValidationError as error:
        raise EvalInputError(
            f"{loaded.path}: its config does not fit this operant ({error}); "
            "evaluate it with the operant version that trained it"
        ) from None
    try:
        env = make_env(
            config.env.id, num_envs, impl=config.env.impl, copy=False, **env_kwargs(config)
        )
        policy = build_registered_policy(config, env.obs_spec, env.act_spec)
    except (EnvError, ConfigError) as error:
        raise EvalInputError(str(error)) from None
    normalizer = None
    try:
        policy.load_state_dict(loaded.policy)
        if loaded.obs_normalizer is not None:
            normalizer = ObservationNormalizer(env.obs_spec.shape, config.normalize.clip_obs)
            normalizer.load_state_dict(loaded.obs_normalizer)
    except (RuntimeError, KeyError, ValueError) as error:
        raise EvalInputError(
            f"{loaded.path}: its weights do not fit its own config ({_first_line(error)})"
        ) from None
    return config, env, policy, normalizer


def play(
    env: Any, policy: Any, normalizer: Any, episodes: int, seed: int, stochastic: bool
) -> list[float]:
    """Returns of the first `episodes` episodes to finish."""
    import torch

    act_spec = env.act_spec
    generator = torch.Generator().manual_seed(seed)
    env.reset(seed=seed)
    env.drain_episode_stats()
    obs = env.obs if isinstance(env.obs, torch.Tensor) else torch.from_numpy(env.obs)
    actions = (
        env.actions if isinstance(env.actions, torch.Tensor) else torch.from_numpy(env.actions)
    )
    returns: list[float] = []
    with torch.inference_mode():
        while len(returns) < episodes:
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
                returns.extend(env.recent_returns(finished).tolist())
    return returns[:episodes]


VIDEO_EXTRA = 'pip install "operant-rl[video]"'
GIF_SUFFIX = ".gif"
FFMPEG_SUFFIXES = (".mp4", ".webm", ".avi", ".mkv", ".mov")


def check_video(path: Path) -> Any:
    """imageio's v2 API, once `path` is known writable as a video: a .gif or an ffmpeg format,
    in a folder that exists, with its writer installed. Raises EvalInputError, one line."""
    suffix = path.suffix.lower()
    if suffix != GIF_SUFFIX and suffix not in FFMPEG_SUFFIXES:
        raise EvalInputError(
            f"--video {path}: write a {GIF_SUFFIX} or one of {', '.join(FFMPEG_SUFFIXES)}"
        )
    if not path.parent.is_dir():
        raise EvalInputError(f"--video {path}: no folder {path.parent}")
    try:
        import imageio.v2 as imageio

        if suffix != GIF_SUFFIX:
            import imageio_ffmpeg  # noqa: F401  (imageio's ffmpeg writer needs it)
    except ImportError as error:
        missing = (error.name or "imageio").split(".")[0]
        raise EvalInputError(f"--video needs {missing}: {VIDEO_EXTRA}") from None
    return imageio


def open_video(path: Path, fps: float) -> Any:
    """An imageio writer for `path` at `fps` frames per second (append_data, close)."""
    imageio = check_video(path)
    if path.suffix.lower() == GIF_SUFFIX:
        return imageio.get_writer(path, mode="I", duration=1000.0 / fps, loop=0)
    # macro_block_size=1: keep Gymnasium's frame size (600x400, 500x500) instead of padding it.
    return imageio.get_writer(path, mode="I", fps=fps, macro_block_size=1)


def record(
    config: Any,
    policy: Any,
    normalizer: Any,
    episodes: int,
    seed: int,
    stochastic: bool,
    path: Path,
) -> tuple[list[float], int]:
    """Play `episodes` episodes on one env drawn into the video `path`; returns their returns
    and the number of frames written."""
    import torch
    from gymnasium import spaces
    from gymnasium.vector import AutoresetMode

    from operant.envs import EnvError, make_env
    from operant.trainer.config import env_kwargs

    try:
        env = make_env(
            config.env.id,
            1,
            impl=config.env.impl,
            copy=False,
            render_mode="rgb_array",
            autoreset_mode=AutoresetMode.NEXT_STEP,
            **env_kwargs(config),
        )
    except EnvError as error:
        raise EvalInputError(f"--video: {error}") from None
    writer = open_video(path, float(env.metadata.get("render_fps", 30)))
    space = env.single_action_space
    generator = torch.Generator().manual_seed(seed)
    returns: list[float] = []
    episode_return, frames = 0.0, 0
    try:
        obs, _ = env.reset(seed=seed)
        writer.append_data(env.render()[0])
        frames += 1
        with torch.inference_mode():
            while len(returns) < episodes:
                seen = torch.as_tensor(obs)
                seen = seen if normalizer is None else normalizer(seen)
                chosen = policy.act(seen, generator)[0] if stochastic else policy.greedy(seen)
                if isinstance(space, spaces.Box):
                    chosen = torch.clamp(
                        chosen, torch.as_tensor(space.low), torch.as_tensor(space.high)
                    )
                obs, reward, terminated, truncated, _ = env.step(
                    chosen if env.impl == "torch" else chosen.numpy()
                )
                writer.append_data(env.render()[0])
                frames += 1
                episode_return += float(reward[0])
                if terminated[0] or truncated[0]:
                    returns.append(episode_return)
                    episode_return = 0.0
    finally:
        writer.close()
        env.close()
    return returns, frames


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.episodes < 1 or args.num_envs < 1:
        print("operant eval: --episodes and --num-envs must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    try:
        if args.video is not None:
            check_video(Path(args.video).expanduser())
        loaded = resolve(args.target, args.runs_dir, args.best)
        config, env, policy, normalizer = build_policy(loaded, args.num_envs)
    except EvalInputError as error:
        print(f"operant eval: {error}", file=sys.stderr)
        return EXIT_USAGE
    import numpy as np

    video: dict[str, Any] = {}
    if args.video is not None:
        try:
            returns, frames = record(
                config,
                policy,
                normalizer,
                args.episodes,
                args.seed,
                args.stochastic,
                Path(args.video).expanduser(),
            )
        except EvalInputError as error:
            print(f"operant eval: {error}", file=sys.stderr)
            return EXIT_USAGE
        video = {"video": str(Path(args.video).expanduser()), "video_frames": frames}
    else:
        returns = play(env, policy, normalizer, args.episodes, args.seed, args.stochastic)
    result = {
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
        **video,
    }
    if args.json:
        print(json.dumps(result))
        return EXIT_OK
    step = f" at step {loaded.global_step:,}" if loaded.global_step is not None else ""
    print(
        f"{config.env.id}: {len(returns)} episodes, return {result['return_mean']:.1f} "
        f"± {result['return_std']:.1f} (min {result['return_min']:.1f}, max "
        f"{result['return_max']:.1f}), {'greedy' if not args.stochastic else 'stochastic'}; "
        f"{loaded.kind} {loaded.path}{step}"
    )
    if video:
        print(f"video: {video['video']} ({video['video_frames']} frames)")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
