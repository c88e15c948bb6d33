"""`EnvLayer`: a vector env made over another one (`self.env`) that is a Gymnasium
`VectorEnv` by type, so Gymnasium's vector wrappers (RecordEpisodeStatistics, NormalizeReward,
...) take it as they take the env under it; what it does not define is the inner env's
(spaces, the BatchEnv contract's buffers and methods, a family's extras)."""

from __future__ import annotations

from typing import Any

from gymnasium.vector import VectorEnv

from operant.envs.contract import DRIVING


class EnvLayer(VectorEnv):
    """Base of InfoModeEnv and FrameStackEnv. VectorEnv's class attributes (metadata, spec,
    render_mode, closed) are the inner env's, copied at construction; a layer that changes
    one sets its own after `_layer_over(env)`."""

    def _layer_over(self, env: Any) -> None:
        self.env = env
        self.metadata = env.metadata
        self.spec = getattr(env, "spec", None)
        self.render_mode = getattr(env, "render_mode", None)
        self.closed = False

    def render(self) -> Any:
        return self.env.render()

    def close(self, **kwargs: Any) -> None:
        if not self.closed:
            self.env.close(**kwargs)
            self.closed = True

    def close_extras(self, **kwargs: Any) -> None:
        self.env.close_extras(**kwargs)

    @property
    def unwrapped(self) -> Any:
        return self.env.unwrapped

    @property
    def np_random(self) -> Any:
        return self.env.np_random

    @np_random.setter
    def np_random(self, value: Any) -> None:
        self.env.np_random = value

    @property
    def np_random_seed(self) -> Any:
        return self.env.np_random_seed

    def __getattr__(self, name: str) -> Any:
        # What a family declares beyond the contract (a game's channels, step_timing, ...);
        # not what drives it (contract.DRIVING: BindsSlots, StepsInHalves): a layer binds
        # slots or steps halves only if it says so itself.
        if name == "env" or name in DRIVING:
            raise AttributeError(name)
        return getattr(self.env, name)
