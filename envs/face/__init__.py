"""The Gymnasium face every family shares: autoreset, seeding, info, rendering, frame stacks."""
