"""`operant eval --video FILE`: the episodes of one env drawn into a video file.

The env renders with `render_mode="rgb_array"` (Gymnasium's renderer for the classic-control
envs, operant.envs.face.render; MinAtar's display for its games) and autoresets NEXT_STEP, so every
frame of every episode is written, the terminal one included. Frames smaller than
`MIN_VIDEO_SIDE` pixels on a side (MinAtar's 10 x 10) are enlarged by a whole factor, each
square a block of pixels, so the video is watchable; larger ones are written as drawn. Frames
stream to the file through imageio (GIF through pillow, other formats through
imageio-ffmpeg's own ffmpeg binary): the `video` extra, `pip install "operant-rl[video]"`.
Gymnasium's RecordVideo writes through moviepy, which itself writes through imageio-ffmpeg;
imageio alone is the smaller dependency and also writes GIFs without ffmpeg.

A run trained on stacked frames (`env.frame_stack = k`) is recorded from its env with the same
stack (operant.envs.face.frame_stack under NEXT_STEP autoreset): the policy sees the last k
observations along the first axis, oldest first, the step after an ending one (the reset)
starting a new stack of its observation k times, as training's stacks start an episode.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from operant.envs.face.render import repeat_pixels
from operant.trainer.eval.load import EvalInputError

MIN_VIDEO_SIDE = 160
"""Frames with a side under this many pixels are enlarged (by a whole factor) to reach it."""

VIDEO_EXTRA = 'pip install "operant-rl[video]"'
GIF_SUFFIX = ".gif"
FFMPEG_SUFFIXES = (".mp4", ".webm", ".avi", ".mkv", ".mov")
CODECS = {
    # WebM holds VP8, VP9 or AV1 only (imageio's default, libx264, broke ffmpeg's pipe); VP9
    # at constant quality, in libvpx's fastest mode (its default took 21 s for 200 frames
    # of 600 x 400, this 2 s)
    ".webm": {
        "codec": "libvpx-vp9",
        "output_params": ["-crf", "32", "-b:v", "0", "-deadline", "realtime", "-cpu-used", "8"],
    },
}
"""imageio's writer keywords by suffix, where its defaults do not write that format."""


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
    """A writer for `path` at `fps` frames per second (append_data, close)."""
    imageio = check_video(path)
    if path.suffix.lower() == GIF_SUFFIX:
        return VideoFile(path, imageio.get_writer(path, mode="I", duration=1000.0 / fps, loop=0))
    # macro_block_size=1: keep Gymnasium's frame size (600x400, 500x500) instead of padding it.
    writer = imageio.get_writer(
        path, mode="I", fps=fps, macro_block_size=1, **CODECS.get(path.suffix.lower(), {})
    )
    return VideoFile(path, writer)


class VideoFile:
    """imageio's writer, its failures (ffmpeg's pipe closed: a codec the container refuses, a
    full disk) one line naming the file, EvalInputError, where they were a traceback."""

    def __init__(self, path: Path, writer: Any):
        self.path, self.writer = path, writer

    def _failed(self, error: OSError) -> EvalInputError:
        return EvalInputError(f"--video {self.path}: writing it failed ({error})")

    def append_data(self, frame: np.ndarray) -> None:
        try:
            self.writer.append_data(frame)
        except OSError as error:
            raise self._failed(error) from None

    def close(self) -> None:
        try:
            self.writer.close()
        except OSError as error:
            raise self._failed(error) from None


def record(
    config: Any,
    policy: Any,
    normalizer: Any,
    episodes: int,
    seed: int,
    stochastic: bool,
    path: Path,
    env_options: dict[str, Any],
) -> tuple[list[float], list[bool], int]:
    """Play `episodes` episodes on one env drawn into the video `path`; returns their returns,
    which of them a time limit cut, and the number of frames written. `env_options`: make_env's
    keywords for the run's env (from operant.trainer.eval.evaluate.build_policy)."""
    import torch

    env = _rendering_env(config, env_options)
    writer = open_video(path, float(env.metadata.get("render_fps", 30)))
    act = _actor(policy, normalizer, env, torch.Generator().manual_seed(seed), stochastic)
    returns: list[float] = []
    cut: list[bool] = []
    episode_return, frames = 0.0, 0
    try:
        obs, _ = env.reset(seed=seed)
        writer.append_data(enlarged(env.render()[0]))
        frames += 1
        with torch.inference_mode():
            while len(returns) < episodes:
                obs, reward, terminated, truncated, _ = env.step(act(obs))
                writer.append_data(enlarged(env.render()[0]))
                frames += 1
                episode_return += float(reward[0])
                if terminated[0] or truncated[0]:
                    returns.append(episode_return)
                    cut.append(bool(truncated[0]) and not bool(terminated[0]))
                    episode_return = 0.0
    finally:
        writer.close()
        env.close()
    return returns, cut, frames


def _rendering_env(config: Any, env_options: dict[str, Any]) -> Any:
    """The run's env, one of it (its frame stack too), drawing frames, resetting on the step
    after an ending one."""
    from gymnasium.vector import AutoresetMode

    from operant.envs import EnvError
    from operant.trainer.config import build_env

    try:
        return build_env(
            config,
            1,
            render_mode="rgb_array",
            autoreset_mode=AutoresetMode.NEXT_STEP,
            **env_options,
        )
    except EnvError as error:
        raise EvalInputError(_cannot_record(config, env_options, error)) from None


def _actor(
    policy: Any, normalizer: Any, env: Any, generator: Any, stochastic: bool
) -> Callable[[Any], Any]:
    """The action the policy takes on an observation, as `env.step` takes it."""
    import torch
    from gymnasium import spaces

    space = env.single_action_space

    def act(obs: Any) -> Any:
        seen = torch.as_tensor(obs)
        seen = seen if normalizer is None else normalizer(seen)
        chosen = policy.act(seen, generator)[0] if stochastic else policy.greedy(seen)
        if isinstance(space, spaces.Box):
            chosen = torch.clamp(chosen, torch.as_tensor(space.low), torch.as_tensor(space.high))
        return chosen if env.impl == "torch" else chosen.numpy()

    return act


def enlarged(frame: np.ndarray) -> np.ndarray:
    """`frame` (H, W, 3) with each pixel repeated k x k times, k the least whole factor that
    brings its shorter side to MIN_VIDEO_SIDE (1 for frames that have it already)."""
    return repeat_pixels(frame, max(1, -(-MIN_VIDEO_SIDE // min(frame.shape[:2]))))


def _cannot_record(config: Any, env_options: dict[str, Any], error: Exception) -> str:
    """Why the env to record could not be made: the error itself, unless the same env without
    a render mode and NEXT_STEP autoreset can be made, which means it draws no frames (the grid
    world: its options name neither)."""
    from operant.envs import EnvError
    from operant.envs.face.render import RendererMissingError
    from operant.trainer.config import build_env

    if isinstance(error, RendererMissingError):  # an extra to install, not an env without frames
        return f'--video: {error} (or "operant-rl[video]", which has it)'
    try:
        build_env(config, 1, **env_options).close()
    except EnvError:
        return f"--video: {error}"
    return (
        f"--video: {config.env.id} draws no frames to record (it has no render_mode "
        "'rgb_array' with NEXT_STEP autoreset); evaluate it without --video"
    )
