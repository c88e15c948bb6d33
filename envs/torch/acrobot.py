"""Acrobot-v1 as batched torch tensor ops (cext/envs/classic/acrobot.pyx has the equations'
provenance)."""

from __future__ import annotations

import math

import torch

from operant.envs.torch.base import TorchVectorEnv


class TorchAcrobot(TorchVectorEnv):
    """Acrobot-v1, book dynamics, RK4 as Gymnasium's `rk4` (see cext/envs/classic/acrobot.pyx)."""

    state_dim = 4
    reset_bounds = ((-0.1, 0.1),) * 4
    DT = 0.2
    LINK_LENGTH_1 = 1.0
    LINK_MASS_1 = 1.0
    LINK_MASS_2 = 1.0
    LINK_COM_POS_1 = 0.5
    LINK_COM_POS_2 = 0.5
    LINK_MOI = 1.0
    MAX_VEL_1 = 4 * math.pi
    MAX_VEL_2 = 9 * math.pi
    WRAPS = 4
    """Unrolled passes of Gymnasium's `while x > M: x -= 2 pi` loops; a state past them (a
    velocity no bounded step reaches) is wrapped with a remainder instead."""

    def _initial_state(self, draws):
        # Gymnasium draws float64 and stores float32.
        return draws.to(torch.float32).to(torch.float64)

    def _observe(self, state):
        theta1, theta2, dtheta1, dtheta2 = state.unbind(0)
        return torch.stack(
            (
                torch.cos(theta1),
                torch.sin(theta1),
                torch.cos(theta2),
                torch.sin(theta2),
                dtheta1,
                dtheta2,
            ),
            dim=1,
        ).to(torch.float32)

    def _dsdt(self, s: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        m1, m2, l1 = self.LINK_MASS_1, self.LINK_MASS_2, self.LINK_LENGTH_1
        lc1, lc2, I1, I2 = self.LINK_COM_POS_1, self.LINK_COM_POS_2, self.LINK_MOI, self.LINK_MOI
        g = 9.8
        theta1, theta2, dtheta1, dtheta2 = s.unbind(0)
        cos_theta2, sin_theta2 = torch.cos(theta2), torch.sin(theta2)
        d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * cos_theta2) + I1 + I2
        d2 = m2 * (lc2**2 + l1 * lc2 * cos_theta2) + I2
        phi2 = m2 * lc2 * g * torch.cos(theta1 + theta2 - math.pi / 2.0)
        phi1 = (
            -m2 * l1 * lc2 * dtheta2**2 * sin_theta2
            - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * sin_theta2
            + (m1 * lc1 + m2 * l1) * g * torch.cos(theta1 - math.pi / 2)
            + phi2
        )
        ddtheta2 = (a + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1**2 * sin_theta2 - phi2) / (
            m2 * lc2**2 + I2 - d2**2 / d1
        )
        ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
        return torch.stack((dtheta1, dtheta2, ddtheta1, ddtheta2))

    def _wrap(self, x: torch.Tensor) -> torch.Tensor:
        low, high = -math.pi, math.pi
        diff = high - low
        for _ in range(self.WRAPS):
            x = torch.where(x > high, x - diff, x)
        for _ in range(self.WRAPS):
            x = torch.where(x < low, x + diff, x)
        return torch.where((x > high) | (x < low), torch.remainder(x - low, diff) + low, x)

    def _dynamics(self, state, actions, first_step):
        torque = actions.to(torch.float64) - 1.0  # AVAIL_TORQUE = [-1, 0, +1]
        dt = self.DT - 0
        dt2 = dt / 2.0
        k1 = self._dsdt(state, torque)
        k2 = self._dsdt(state + dt2 * k1, torque)
        k3 = self._dsdt(state + dt2 * k2, torque)
        k4 = self._dsdt(state + dt * k3, torque)
        y = state + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        theta1 = self._wrap(y[0])
        theta2 = self._wrap(y[1])
        dtheta1 = y[2].clamp(-self.MAX_VEL_1, self.MAX_VEL_1)
        dtheta2 = y[3].clamp(-self.MAX_VEL_2, self.MAX_VEL_2)
        terminated = -torch.cos(theta1) - torch.cos(theta2 + theta1) > 1.0
        reward = terminated.to(torch.float64) - 1.0
        return torch.stack((theta1, theta2, dtheta1, dtheta2)), reward, terminated
