"""How a Python env's Box observations become rows of the contract's buffers.

A Gymnasium env written in Python (`env.impl = "reference"`, in the trainer's process or in
env workers) declares a Box of any shape and dtype. Its rows are one of two kinds:

- **an image** (with Discrete actions, what the CNN policy reads: a 3-D Box of any dtype, or a
  uint8 Box of two dimensions, a grayscale (H, W) frame, or four, stacked frames) keeps its
  dtype and its values as (C, H, W) rows, channels first, as Operant's own pixel kernels write
  them: (H, W) is one channel, k stacked frames of C channels are k x C. A channels-last
  frame, (H, W, C), is transposed as each observation is copied into its row (the copy every
  Python env makes anyway). The last dimension is the channels where it is smaller than both
  the frame's others: (84, 84, 3) and (4, 84, 84, 1) are channels last; (3, 84, 84),
  (16, 10, 10) and a cube, (10, 10, 10), are channels first (stable-baselines3 takes the
  smallest dimension for the channels, and a (16, 10, 10) frame's rows for them). A uint8 image
  whose space runs from 0 to 255 has `ObsSpec.scale` 1/255: the policy scales it to [0, 1]
  inside its first layer (SB3 and CleanRL divide Atari frames by 255); the buffers keep the
  bytes.
- **anything else** (vectors, other boxes, images with Box actions) is flattened to float32
  rows, unscaled, as the MLP reads them.

`single_observation_space` of the env's Gymnasium face is the row's space (`space`), so what
`step()` returns is in it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gymnasium import spaces

from operant.envs.contract import ObsSpec


@dataclass(frozen=True)
class ObsRows:
    """One env's declared observation space, and the row the buffers hold for it."""

    spec: ObsSpec
    space: spaces.Box
    """The row's space: what the env's Gymnasium face returns."""
    axes: tuple[int, ...] | None = None
    """The transpose from the declared observation to the row (channels-last images)."""

    size: int = field(init=False)
    """Numbers in a row."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "size", int(np.prod(self.spec.shape)))

    def row(self, obs: Any) -> np.ndarray:
        """One observation as the row's shape (a view where it can be; the caller's
        assignment into the buffer converts the dtype)."""
        value = np.asarray(obs)
        if self.axes is not None and value.ndim == len(self.axes):
            value = value.transpose(self.axes)
        if value.size != self.size:
            raise ValueError(
                f"an observation of shape {np.shape(obs)} ({value.size} numbers) where its "
                f"observation space has {self.size}"
            )
        return value.reshape(self.spec.shape)

    def rows(self, batch: Any, num_envs: int) -> np.ndarray:
        """A batch of observations (num_envs first) as rows."""
        value = np.asarray(batch)
        if self.axes is not None and value.ndim == len(self.axes) + 1:
            value = value.transpose((0, *(axis + 1 for axis in self.axes)))
        return value.reshape((num_envs, *self.spec.shape))


def obs_rows(space: spaces.Box, act_space: spaces.Space[Any]) -> ObsRows:
    """The rows of a Python env with these spaces (see the module's docstring)."""
    if is_image(space, act_space):
        return _image_rows(space)
    size = int(np.prod(space.shape))
    low = np.asarray(space.low, dtype=np.float32).reshape(size)
    high = np.asarray(space.high, dtype=np.float32).reshape(size)
    return ObsRows(ObsSpec((size,), np.dtype(np.float32)), spaces.Box(low, high, dtype=np.float32))


def is_image(space: spaces.Box, act_space: spaces.Space[Any]) -> bool:
    """A frame the CNN can read: with Discrete actions, a 3-D Box of any dtype, or a 2-D
    (H, W) or 4-D (stacked frames) Box of bytes."""
    if not isinstance(act_space, spaces.Discrete):
        return False
    rank = len(space.shape)
    return rank == 3 or (rank in (2, 4) and space.dtype == np.uint8)


def _image_rows(space: spaces.Box) -> ObsRows:
    shape = tuple(int(size) for size in space.shape)
    axes = _to_channels_first(shape)
    low, high = np.asarray(space.low), np.asarray(space.high)
    if axes is not None:
        low, high = low.transpose(axes), high.transpose(axes)
    rows = _row_shape(low.shape)
    low, high = low.reshape(rows), high.reshape(rows)
    byte_image = space.dtype == np.uint8 and bool((low == 0).all() and (high == 255).all())
    spec = ObsSpec(rows, space.dtype, 1.0 / 255.0 if byte_image else 1.0)
    return ObsRows(spec, spaces.Box(low, high, dtype=space.dtype), axes)


def _to_channels_first(shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """The transpose that puts a frame's channels before its rows and columns, or None where
    they are first already: the last dimension is the channels where it is smaller than both
    the others, (84, 84, 3) or (4, 84, 84, 1) stacked; (3, 84, 84), (16, 10, 10) and a cube
    are channels first."""
    if len(shape) == 3 and shape[2] < min(shape[0], shape[1]):
        return (2, 0, 1)
    if len(shape) == 4 and shape[3] < min(shape[1], shape[2]):
        return (0, 3, 1, 2)
    return None


def _row_shape(shape: tuple[int, ...]) -> tuple[int, int, int]:
    """(C, H, W) from channels-first (H, W), (C, H, W) or stacked (k, C, H, W) frames."""
    if len(shape) == 2:
        return (1, shape[0], shape[1])
    if len(shape) == 4:
        return (shape[0] * shape[1], shape[2], shape[3])
    return (shape[0], shape[1], shape[2])
