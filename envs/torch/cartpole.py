"""CartPole-v1 as batched torch tensor ops (cext/envs/classic/cartpole.pyx has the equations'
provenance)."""

from __future__ import annotations

import math

import torch

from operant.envs.torch.base import TorchVectorEnv


class TorchCartPole(TorchVectorEnv):
    """CartPole-v1 (cext/envs/classic/cartpole.pyx has the equations' provenance)."""

    state_dim = 4
    reset_bounds = ((-0.05, 0.05),) * 4
    GRAVITY = 9.8
    MASSCART = 1.0
    MASSPOLE = 0.1
    TOTAL_MASS = MASSPOLE + MASSCART
    LENGTH = 0.5
    POLEMASS_LENGTH = MASSPOLE * LENGTH
    FORCE_MAG = 10.0
    TAU = 0.02
    THETA_THRESHOLD = 12 * 2 * math.pi / 360
    X_THRESHOLD = 2.4

    def _dynamics(self, state, actions, first_step):
        x, x_dot, theta, theta_dot = state.unbind(0)
        force = (actions == 1).to(torch.float64) * (2 * self.FORCE_MAG) - self.FORCE_MAG
        costheta = torch.cos(theta)
        sintheta = torch.sin(theta)
        temp = (force + self.POLEMASS_LENGTH * (theta_dot * theta_dot) * sintheta) / self.TOTAL_MASS
        thetaacc = (self.GRAVITY * sintheta - costheta * temp) / (
            self.LENGTH * (4.0 / 3.0 - self.MASSPOLE * (costheta * costheta) / self.TOTAL_MASS)
        )
        xacc = temp - self.POLEMASS_LENGTH * thetaacc * costheta / self.TOTAL_MASS
        x = x + self.TAU * x_dot
        x_dot = x_dot + self.TAU * xacc
        theta = theta + self.TAU * theta_dot
        theta_dot = theta_dot + self.TAU * thetaacc
        terminated = (
            (x < -self.X_THRESHOLD)
            | (x > self.X_THRESHOLD)
            | (theta < -self.THETA_THRESHOLD)
            | (theta > self.THETA_THRESHOLD)
        )
        return torch.stack((x, x_dot, theta, theta_dot)), torch.ones_like(x), terminated
