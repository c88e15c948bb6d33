"""Checkpoints: the file format, the trainer's state, where they go and how a run resumes."""
