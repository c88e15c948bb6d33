"""The torch family (`env.impl = "torch"`): every Operant env as batched tensor ops on any
device. `base` holds what all of them share (`TorchVectorEnv`: buffers, RNG streams,
autoreset, episode statistics, explicit state); each other module is one env's dynamics.

Importing this package imports torch; `import operant.envs` does not import it.
"""

from operant.envs.torch.acrobot import TorchAcrobot
from operant.envs.torch.base import RECENT_CAPACITY, TorchVectorEnv, seed_streams
from operant.envs.torch.cartpole import TorchCartPole
from operant.envs.torch.mountain_car import TorchMountainCar
from operant.envs.torch.mountain_car_continuous import TorchMountainCarContinuous
from operant.envs.torch.pendulum import TorchPendulum

__all__ = [
    "RECENT_CAPACITY",
    "TorchAcrobot",
    "TorchCartPole",
    "TorchMountainCar",
    "TorchMountainCarContinuous",
    "TorchPendulum",
    "TorchVectorEnv",
    "seed_streams",
]
