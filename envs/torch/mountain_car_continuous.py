"""MountainCarContinuous-v0 as batched torch tensor ops
(cext/envs/classic/mountain_car_continuous.pyx has
the equations' provenance)."""

from __future__ import annotations

import torch

from operant.envs.torch.mountain_car import TorchMountainCar


class TorchMountainCarContinuous(TorchMountainCar):
    """MountainCarContinuous-v0, with Gymnasium's float32/float64 mix reproduced exactly (see
    cext/envs/classic/mountain_car_continuous.pyx): float64 on an episode's first step, float32
    after."""

    GOAL_POSITION = 0.45
    POWER = 0.0015

    def _dynamics(self, state, actions, first_step):
        position, velocity = state.unbind(0)
        position32, velocity32 = position.to(torch.float32), velocity.to(torch.float32)
        action = actions[:, 0]
        in_range = (action >= -1.0) & (action <= 1.0)
        gravity_term = self.GRAVITY * torch.where(
            first_step, torch.cos(3 * position), torch.cos((3 * position32).to(torch.float64))
        )
        # In range, the force is the float32 action and `force * power - gravity_term` is
        # float32; out of range it is the Python float +-1.0 and the term is float64.
        increment = torch.where(
            in_range,
            (action * self.POWER - gravity_term.to(torch.float32)).to(torch.float64),
            action.clamp(-1.0, 1.0).to(torch.float64) * self.POWER - gravity_term,
        )
        position64, velocity64, terminated64 = self._move(position, velocity, increment)
        position32, velocity32, terminated32 = self._move(
            position32, velocity32, increment.to(torch.float32)
        )
        position = torch.where(first_step, position64.to(torch.float32), position32)
        velocity = torch.where(first_step, velocity64.to(torch.float32), velocity32)
        terminated = torch.where(first_step, terminated64, terminated32)
        # The reward charges the unclipped action.
        action64 = action.to(torch.float64)
        reward = terminated.to(torch.float64) * 100.0 - action64 * action64 * 0.1
        return torch.stack((position, velocity)).to(torch.float64), reward, terminated
