"""What runs around the loop at its update boundaries: telemetry, progress, TensorBoard."""
