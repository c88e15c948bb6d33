"""The policies a run trains: the registry that picks one, and each network."""
