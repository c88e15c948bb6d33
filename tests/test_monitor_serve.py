"""`textual serve "operant monitor --latest"`: the monitor in a browser, as README documents.

The test speaks to the server the way the browser page does: it loads the page, opens the
websocket, reads the app's screen output until the run is drawn, then presses q over it."""

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from monitor_fixtures import Run

aiohttp = pytest.importorskip("aiohttp", reason="textual-dev (the test extra) brings aiohttp")
pytest.importorskip("textual_dev", reason="`textual serve` comes from textual-dev")

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def watch_in_browser(port: int, run_id: str) -> tuple[str, str]:
    """(the page, the screen text the app sent) once the run id is on screen; then press q."""
    base = f"http://127.0.0.1:{port}"
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    async with aiohttp.ClientSession() as session:
        while True:
            try:
                async with session.get(base + "/") as response:
                    page = await response.text()
                    break
            except aiohttp.ClientConnectionError:
                if loop.time() > deadline:
                    raise
                await asyncio.sleep(0.1)
        output, screen = b"", ""
        async with session.ws_connect(f"{base}/ws?width=100&height=30") as websocket:
            while run_id not in screen or "running" not in screen:
                remaining = deadline - loop.time()
                assert remaining > 0, f"the run never appeared; got:\n{screen[-2000:]}"
                message = await websocket.receive(timeout=remaining)
                if message.type == aiohttp.WSMsgType.BINARY:  # the app's terminal output
                    output += message.data
                    screen = ANSI.sub("", output.decode("utf-8", "replace"))
                elif message.type != aiohttp.WSMsgType.TEXT:
                    raise AssertionError(f"the websocket closed early: {message!r}")
            await websocket.send_json(["stdin", "q"])
            # q detaches: the app ends and the server closes the socket.
            while not websocket.closed:
                message = await websocket.receive(timeout=max(1.0, deadline - loop.time()))
                if message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED,
                                    aiohttp.WSMsgType.CLOSING):
                    break
    return page, screen


def test_textual_serve_serves_the_monitor(tmp_path):
    run = Run(tmp_path)
    run.writer.start_heartbeat()
    run.publish(12)
    port = free_port()
    # The command as README gives it; `operant` is found on PATH, next to this Python.
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    server = subprocess.Popen(
        [sys.executable, "-m", "textual_dev", "serve", "--host", "127.0.0.1",
         "--port", str(port), f"operant monitor --latest --runs-dir {tmp_path}"],
        env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True)
    try:
        page, screen = asyncio.run(watch_in_browser(port, run.run_id))
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=10)
        run.close()
    assert "/ws" in page
    assert "CartPole-v1" in screen and "12,288" in screen and "grad_norm_p99" in screen
