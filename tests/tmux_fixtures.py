"""A real terminal for tests: a command in a tmux pane of a tmux server of its own, driven
with send-keys and read with capture-pane."""

from __future__ import annotations

import re
import subprocess
import time
import uuid


class Tmux:
    """`command` in a pane; after it ends the pane says `MONITOR-EXIT=<its status>`."""

    def __init__(self, command: list[str], size: tuple[int, int] = (80, 24)):
        # A server of its own (-L), so the user's tmux sessions are never touched; its
        # window is `size` columns x rows, by default 80x24 (tmux's own), the smallest size
        # the monitor is made for.
        self.socket = f"operant-test-{uuid.uuid4().hex[:8]}"
        shell = " ".join(command) + "; echo MONITOR-EXIT=$?; sleep 60"
        columns, rows = size
        self.tmux("new-session", "-d", "-s", "monitor", "-x", str(columns), "-y", str(rows), shell)

    def tmux(self, *args: str) -> str:
        result = subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=20
        )
        assert result.returncode == 0, result.stderr
        return result.stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "monitor")

    def keys(self, *keys: str) -> None:
        for key in keys:
            self.tmux("send-keys", "-t", "monitor", key)
            # Apart, so that escape followed by a letter is not read as alt+letter.
            time.sleep(0.3)

    def until(self, *words: str, timeout_s: float = 20.0) -> str:
        return self.until_true(
            lambda screen: all(word in screen for word in words), timeout_s, words
        )

    def until_true(self, predicate, timeout_s: float = 20.0, what: object = "") -> str:
        deadline = time.monotonic() + timeout_s
        while True:
            screen = self.screen()
            if predicate(screen):
                return screen
            assert time.monotonic() < deadline, f"never saw {what}; screen:\n{screen}"
            time.sleep(0.1)

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=20)


def update_number(screen: str) -> int:
    """The update count on the monitor's process line."""
    match = re.search(r"ago  update ([\d,]+)", screen)
    return int(match.group(1).replace(",", "")) if match else -1
