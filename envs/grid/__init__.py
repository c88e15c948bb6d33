"""Grid-v0, the many-agent grid world: its face, its configuration and its PettingZoo face."""
