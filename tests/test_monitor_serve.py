"""`textual serve "operant monitor --latest"`: the monitor in a browser, as README documents.

Two ways in:
- speaking to the server the way the browser page does (no browser needed): load the page,
  open the websocket, read the app's screen output until the run is drawn, press q over it;
- in a real headless Chromium (Debian's `chromium`, driven by Playwright, both only for
  tests): while a real operant-train run trains, the page shows the run and its step count
  growing, and q in the page detaches the monitor while the trainer trains on. Skipped, with
  the reason, where no Chromium or no Playwright is installed.
"""

import asyncio
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from monitor_fixtures import Run
from signal_defaults import default_signals

from operant.shared.reader import MetricsReader
from operant.shared.runs import METRICS_FILE

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
                if message.type in (
                    aiohttp.WSMsgType.CLOSE,
                    aiohttp.WSMsgType.CLOSED,
                    aiohttp.WSMsgType.CLOSING,
                ):
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
        [
            sys.executable,
            "-m",
            "textual_dev",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            f"operant monitor --latest --runs-dir {tmp_path}",
        ],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        page, screen = asyncio.run(watch_in_browser(port, run.run_id))
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=10)
        run.close()
    assert "/ws" in page
    assert "CartPole-v1" in screen and "12,288" in screen and "grad_norm_p99" in screen


# --- in a real browser ---------------------------------------------------------------------

# Keeps the page's xterm.js Terminal where the test can read it: textual-serve's script makes it
# as `this.terminal = new Terminal(...)` and keeps it nowhere global. Its buffer holds what the
# page shows, cell for cell, whichever renderer (WebGL, canvas) draws it.
CAPTURE_TERMINAL = """
Object.defineProperty(Object.prototype, "terminal", {
  configurable: true,
  set(value) {
    if (value && value.buffer) { window.operantTerminal = value; }
    Object.defineProperty(this, "terminal",
                          {value, writable: true, configurable: true, enumerable: true});
  },
});
"""
SCREEN_TEXT = """() => {
  const terminal = window.operantTerminal;
  if (!terminal) { return ""; }
  const buffer = terminal.buffer.active, lines = [];
  for (let y = 0; y < terminal.rows; y++) {
    const line = buffer.getLine(buffer.viewportY + y);
    lines.push(line ? line.translateToString(true, 0, terminal.cols) : "");
  }
  return lines.join("\\n");
}"""
# A budget the test never reaches: the trainer is stopped with SIGTERM at the end.
TRAINER_STEPS = 100_000_000


@pytest.fixture
def chromium():
    """(the Playwright sync API, a Chromium to drive): $OPERANT_TEST_CHROMIUM, else Debian's
    `chromium` (apt install chromium) or another distribution's name for it, on PATH. The
    test skips, saying why, without one or without Playwright."""
    path = next(
        (
            found
            for name in (os.environ.get("OPERANT_TEST_CHROMIUM"), "chromium", "chromium-browser")
            if name and (found := shutil.which(name))
        ),
        None,
    )
    if path is None:
        pytest.skip("no Chromium installed (apt install chromium, or set OPERANT_TEST_CHROMIUM)")
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="Playwright (the test extra) drives the browser"
    )
    return sync_api, path


def global_step_on(screen: str) -> int | None:
    """The `global_step` row of the metrics table on the page's screen."""
    match = re.search(r"global_step +([\d,]+) steps", screen)
    return int(match.group(1).replace(",", "")) if match else None


def wait_for(predicate, what: str, timeout_s: float = 60.0):
    deadline = time.monotonic() + timeout_s
    while not (result := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)
    return result


def monitors_under(server: subprocess.Popen) -> list[psutil.Process]:
    """The `operant monitor` processes textual serve started for its page."""
    found = []
    for child in psutil.Process(server.pid).children(recursive=True):
        try:
            if "monitor" in child.cmdline():
                found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found


def ended(process: psutil.Process) -> bool:
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.fixture
def training(tmp_path):
    """A real operant-train run in the background, under tmp_path/runs; stopped (SIGTERM, a
    checkpoint, exit 0) when the test is done."""
    root = tmp_path / "runs"
    trainer = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "operant-train"),
            "--runs-dir",
            str(root),
            "--total-steps",
            str(TRAINER_STEPS),
            "--quiet",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_signals,
    )
    try:
        wait_for(
            lambda: (root / "latest").exists() or trainer.poll() is not None,
            "the trainer's run directory",
        )
        assert trainer.poll() is None, trainer.stderr.read()
        run_id = os.readlink(root / "latest")
        wait_for(lambda: (root / run_id / METRICS_FILE).exists(), "the metrics file")
        yield root, run_id, trainer
    finally:
        trainer.send_signal(signal.SIGTERM)
        try:
            trainer.wait(timeout=60)
        except subprocess.TimeoutExpired:
            trainer.kill()
            trainer.wait()
    assert trainer.returncode == 0, trainer.stderr.read()


def trainer_step(root: Path, run_id: str) -> int:
    with MetricsReader(root / run_id / METRICS_FILE) as reader:
        return reader.counter("global_step")


def test_the_monitor_in_a_real_browser_follows_training_and_q_detaches(
    chromium, training, tmp_path
):
    sync_api, chromium_path = chromium
    root, run_id, trainer = training
    port = free_port()
    # README's command, found on PATH next to this Python; the runs root comes from the
    # environment, as `operant monitor --latest` finds it from any directory.
    env = dict(
        os.environ,
        OPERANT_RUNS_DIR=str(root),
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    )
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "textual_dev",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "operant monitor --latest",
        ],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        with sync_api.sync_playwright() as playwright:
            # Debian's Chromium, not one Playwright downloads; no sandbox, as root in CI.
            browser = playwright.chromium.launch(
                executable_path=chromium_path, args=["--no-sandbox"]
            )
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                page.add_init_script(CAPTURE_TERMINAL)
                wait_for(
                    lambda: _loads(page, f"http://127.0.0.1:{port}/", sync_api.Error), "the page"
                )

                def screen() -> str:
                    return page.evaluate(SCREEN_TEXT)

                first = wait_for(
                    lambda: (
                        (text := screen())
                        and run_id in text
                        and "● running" in text
                        and global_step_on(text)
                        and text
                    ),
                    "the run on the page",
                )
                later = wait_for(
                    lambda: (
                        (text := screen())
                        and (global_step_on(text) or 0) > global_step_on(first)
                        and text
                    ),
                    "the step count to grow",
                )
                assert global_step_on(later) > global_step_on(first) > 0
                page.screenshot(
                    path=os.environ.get("OPERANT_BROWSER_SCREENSHOT", str(tmp_path / "monitor.png"))
                )
                (monitor,) = monitors_under(server)
                page.click(".textual-terminal")
                page.keyboard.press("q")
                wait_for(lambda: ended(monitor), "the monitor to detach")
            finally:
                browser.close()
        # Detaching touched nothing: the trainer trains on.
        assert trainer.poll() is None
        detached_at = trainer_step(root, run_id)
        wait_for(lambda: trainer_step(root, run_id) > detached_at, "steps after detaching")
        assert trainer.poll() is None
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=10)


def _loads(page, url: str, playwright_error: type[Exception]) -> bool:
    """True once the server answers the page; False while it is still starting."""
    try:
        page.goto(url)
    except playwright_error as error:
        if "ERR_CONNECTION_REFUSED" not in str(error):
            raise
        return False
    return True
