"""Gymnasium's own Python envs behind the contract: in process, or stepped in worker processes."""
