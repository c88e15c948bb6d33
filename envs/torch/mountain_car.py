"""MountainCar-v0 as batched torch tensor ops (cext/envs/classic/mountain_car.pyx has the equations'
provenance)."""

from __future__ import annotations

import torch

from operant.envs.torch.base import TorchVectorEnv


class TorchMountainCar(TorchVectorEnv):
    """MountainCar-v0 (see cext/envs/classic/mountain_car.pyx)."""

    state_dim = 2
    reset_bounds = ((-0.6, -0.4),)
    MIN_POSITION = -1.2
    MAX_POSITION = 0.6
    MAX_SPEED = 0.07
    GOAL_POSITION = 0.5
    FORCE = 0.001
    GRAVITY = 0.0025

    def _initial_state(self, draws):
        return torch.cat((draws, torch.zeros_like(draws)))

    def _move(self, position, velocity, increment):
        """Gymnasium's step after the force and gravity term, in the dtype of the tensors
        given (Python-float constants meet float32 tensors as float32, as in NumPy)."""
        velocity = (velocity + increment).clamp(-self.MAX_SPEED, self.MAX_SPEED)
        position = (position + velocity).clamp(self.MIN_POSITION, self.MAX_POSITION)
        velocity = torch.where((position == self.MIN_POSITION) & (velocity < 0), 0.0, velocity)
        return position, velocity, (position >= self.GOAL_POSITION) & (velocity >= 0)

    def _dynamics(self, state, actions, first_step):
        position, velocity = state.unbind(0)
        push = (actions - 1).to(torch.float64) * self.FORCE
        position, velocity, terminated = self._move(
            position, velocity, push + torch.cos(3 * position) * (-self.GRAVITY)
        )
        return torch.stack((position, velocity)), torch.full_like(position, -1.0), terminated
