"""Fixtures shared by several test modules."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the tests' helper modules (importlib mode)


@pytest.fixture(scope="session")
def trainer_server():
    """Starts operant-train processes by forking them from a server that has torch imported
    (tests/trainer_forkserver.py): one server for the whole session, one trainer at a time."""
    from trainer_forkserver import ForkServer

    with ForkServer() as server:
        yield server
