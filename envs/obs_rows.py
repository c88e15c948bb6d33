"""How a Python env's Box observations become rows of the contract's buffers.

A Gymnasium env written in Python (`env.impl = "reference"`, in the trainer's process or in
env workers) declares a Box of any shape and dtype. Its rows are one of two kinds:

- **an image** (a 3-D Box, with Discrete actions: what the CNN policy reads) keeps its dtype
  and its values, channels first, (C, H, W), as Operant's own pixel kernels write them. A
  channels-last space, (H, W, C), is transposed as each observation is copied into its row
  (the copy every Python env makes anyway). Which it is follows stable-baselines3's rule
  (`is_image_space_channels_first`): the smallest dimension first is channels first, else the
  channels are last; a cube, (10, 10, 10), reads as channels first. A uint8 image whose space
  runs from 0 to 255 has `ObsSpec.scale` 1/255: the policy scales it to [0, 1] inside its
  first layer (SB3 and CleanRL divide Atari frames by 255); the buffers keep the bytes.
- **anything else** (vectors, 2-D or 4-D boxes, images with Box actions) is flattened to
  float32 rows, unscaled, as the MLP reads them.

`single_observation_space` of the env's Gymnasium face is the row's space (`space`), so what
`step()` returns is in it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces

from operant.envs.contract import ObsSpec

CHANNELS_LAST = (2, 0, 1)
"""(H, W, C) -> (C, H, W)."""


@dataclass(frozen=True)
class ObsRows:
    """One env's declared observation space, and the row the buffers hold for it."""

    spec: ObsSpec
    space: spaces.Box
    """The row's space: what the env's Gymnasium face returns."""
    axes: tuple[int, ...] | None = None
    """The transpose from the declared observation to the row (channels-last images)."""

    @property
    def image(self) -> bool:
        return len(self.spec.shape) == 3

    def row(self, obs: Any) -> np.ndarray:
        """One observation as the row's shape (a view where it can be; the caller's
        assignment into the buffer converts the dtype)."""
        value = np.asarray(obs)
        if self.axes is not None and value.ndim == len(self.axes):
            value = value.transpose(self.axes)
        if value.size != int(np.prod(self.spec.shape)):
            raise ValueError(
                f"an observation of shape {np.shape(obs)} ({value.size} numbers) where its "
                f"observation space has {int(np.prod(self.spec.shape))}"
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
    if len(space.shape) == 3 and isinstance(act_space, spaces.Discrete):
        return _image_rows(space)
    size = int(np.prod(space.shape))
    low = np.asarray(space.low, dtype=np.float32).reshape(size)
    high = np.asarray(space.high, dtype=np.float32).reshape(size)
    return ObsRows(ObsSpec((size,), np.float32), spaces.Box(low, high, dtype=np.float32))


def _image_rows(space: spaces.Box) -> ObsRows:
    shape = tuple(int(size) for size in space.shape)
    axes = None if int(np.argmin(shape)) == 0 else CHANNELS_LAST
    low, high = np.asarray(space.low), np.asarray(space.high)
    if axes is not None:
        low, high = low.transpose(axes), high.transpose(axes)
    byte_image = space.dtype == np.uint8 and bool((low == 0).all() and (high == 255).all())
    spec = ObsSpec(low.shape, space.dtype, 1.0 / 255.0 if byte_image else 1.0)
    return ObsRows(spec, spaces.Box(low, high, dtype=space.dtype), axes)
