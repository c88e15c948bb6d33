"""The training loop: a rollout into storage, GAE, the PPO update and its native paths."""
