"""Adapters that let other RL libraries train on Operant's envs.

Each adapter is a submodule imported on its own (`operant.compat.sb3` for stable-baselines3), so
neither `import operant` nor `import operant.compat` imports a library the user may not have.
"""
