"""Pendulum-v1 as batched torch tensor ops (cext/envs/classic/pendulum.pyx has the equations'
provenance)."""

from __future__ import annotations

import math

import torch

from operant.envs.torch.base import TorchVectorEnv


class TorchPendulum(TorchVectorEnv):
    """Pendulum-v1 (see cext/envs/classic/pendulum.pyx for the float32 torque terms)."""

    state_dim = 2
    reset_bounds = ((-math.pi, math.pi), (-1.0, 1.0))
    MAX_SPEED = 8.0
    MAX_TORQUE = 2.0
    DT = 0.05
    G = 10.0
    M = 1.0
    L = 1.0

    def _observe(self, state):
        theta, theta_dot = state.unbind(0)
        return torch.stack((torch.cos(theta), torch.sin(theta), theta_dot), dim=1).to(torch.float32)

    def _dynamics(self, state, actions, first_step):
        th, thdot = state.unbind(0)
        u = actions[:, 0].clamp(-self.MAX_TORQUE, self.MAX_TORQUE)
        normalized = torch.remainder(th + math.pi, 2 * math.pi) - math.pi
        costs = (
            normalized * normalized + 0.1 * (thdot * thdot) + (0.001 * (u * u)).to(torch.float64)
        )
        newthdot = (
            thdot
            + (
                3 * self.G / (2 * self.L) * torch.sin(th)
                + (3.0 / (self.M * self.L**2) * u).to(torch.float64)
            )
            * self.DT
        )
        newthdot = newthdot.clamp(-self.MAX_SPEED, self.MAX_SPEED)
        newth = th + newthdot * self.DT
        return torch.stack((newth, newthdot)), -costs, torch.zeros_like(th, dtype=torch.bool)
