"""What the monitor must never do: import torch, make the headless paths load Textual, import
a command module from a data module, write into a run directory, or start before a user's
mistake is reported."""

import ast
import asyncio
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from monitor_fixtures import Run

from operant.monitor import cli
from operant.monitor.app import HelpScreen, MonitorApp, RunPicker
from operant.monitor.source import ReaderSource


def python(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_the_app_never_imports_torch():
    probe = (
        "import sys\n"
        "import operant.monitor.app, operant.monitor.cli, operant.launch\n"
        "print('torch' in sys.modules, 'textual' in sys.modules)\n"
    )
    assert python(probe) == "False True"


def test_once_and_json_never_import_textual(tmp_path):
    run = Run(tmp_path)
    run.publish(3)
    probe = (
        "import sys\n"
        "from operant.cli import main\n"
        f"assert main(['monitor', '--latest', '--once', '--runs-dir', {str(tmp_path)!r}])"
        " == 0\n"
        f"assert main(['monitor', '--latest', '--json', '--runs-dir', {str(tmp_path)!r}])"
        " == 0\n"
        "print('textual' in sys.modules, 'torch' in sys.modules)\n"
    )
    try:
        assert python(probe).splitlines()[-1] == "False False"
    finally:
        run.close()


# The modules of commands (`operant monitor`, `operant runs`, `operant exporter`); everything
# else in the folder is data, words or view, which they import and which never imports them.
COMMAND_MODULES = {"operant.monitor.cli", "operant.monitor.runs_cmd", "operant.monitor.exporter"}


def imported_modules(path: Path) -> set[str]:
    """Every module `path` imports, at its top or inside a function (`from A import b` names
    both A and A.b: b may be a module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_no_data_module_imports_a_command_module():
    """docs/architecture.md: inside a folder, data modules never import command modules. The
    widgets took `--once`'s rank table from operant.monitor.cli and the app `operant runs`'
    words from its module, which imports cli, which imports the app: a cycle that an import
    inside a function hid."""
    folder = Path(cli.__file__).resolve().parent
    modules = {f"operant.monitor.{path.stem}": path for path in folder.glob("*.py")}
    assert set(modules) >= COMMAND_MODULES
    for name, path in sorted(modules.items()):
        if name not in COMMAND_MODULES:
            assert not imported_modules(path) & COMMAND_MODULES, name


def tree_state(root: Path) -> dict[str, tuple]:
    """Every path under root with its type, size, modification and change times and, for
    files, a hash of the contents: what any write, rename, chmod or new file would change."""
    state = {}
    for directory, folders, files in os.walk(root):
        for name in folders + files:
            path = Path(directory, name)
            st = path.lstat()
            digest = (
                hashlib.sha256(path.read_bytes()).hexdigest()
                if path.is_file() and not path.is_symlink()
                else ""
            )
            state[str(path.relative_to(root))] = (
                st.st_mode,
                st.st_size,
                st.st_mtime_ns,
                st.st_ctime_ns,
                digest,
            )
    return state


def test_the_monitor_never_writes_into_a_run_directory(tmp_path):
    finished = Run(tmp_path, "cartpole-finished", latest=False)
    finished.publish(20)
    finished.finish()
    finished.close()
    crashed = Run(tmp_path, "cartpole-crashed")
    crashed.publish(5)
    before = tree_state(tmp_path)

    async def every_key():
        app = MonitorApp(ReaderSource(tmp_path, "cartpole-finished", interval_s=0.05))
        async with app.run_test(size=(120, 40)) as pilot:
            while app.view is None or not app.view.columns:
                await pilot.pause(0.02)
            for keys, screen in (
                (["r"], RunPicker),
                (["escape"], None),
                (["question_mark"], HelpScreen),
                (["escape"], None),
                (["p"], None),
                (["p"], None),
            ):
                await pilot.press(*keys)
                await pilot.pause(0.1)
                if screen is not None:
                    assert isinstance(app.screen, screen)
            app.attach("cartpole-crashed")
            while app.view.run_id != "cartpole-crashed":
                await pilot.pause(0.02)
            await pilot.pause(0.3)  # several more reads of a file whose writer is alive
            await pilot.press("q")
        assert app.return_value == "cartpole-crashed"

    try:
        asyncio.run(every_key())
        for args in (["--latest", "--once"], ["cartpole-finished", "--json"]):
            assert cli.main([*args, "--runs-dir", str(tmp_path)]) == 0
        assert tree_state(tmp_path) == before
    finally:
        crashed.close()


@pytest.mark.parametrize(
    "args, message",
    [
        (["cartpole-x", "--follow"], "--follow follows the latest run"),
        (["--latest", "--refresh", "0"], "--refresh 0: give a number of seconds"),
        (["--latest"], "no runs yet under"),
        (["nope"], "no run 'nope'"),
        (["--latest", "--follow", "--once"], "--follow keeps the live view on the newest run"),
        (["--follow", "--json"], "drop --follow (or --once/--json)"),  # --follow was ignored
    ],
)
def test_interactive_mistakes_fail_in_one_line_before_textual(
    tmp_path, capsys, args, message, monkeypatch
):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    assert cli.main([*args, "--runs-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err.startswith("operant monitor: ")


def test_interactive_without_a_terminal_points_to_once(tmp_path, capsys, monkeypatch):
    run = Run(tmp_path)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False)
    monkeypatch.delenv(cli.WEB_DRIVER_ENV, raising=False)
    try:
        assert cli.main(["--latest", "--runs-dir", str(tmp_path)]) == 2
    finally:
        run.close()
    err = capsys.readouterr().err
    assert "needs a terminal; use --once or --json" in err and err.count("\n") == 1


def test_latest_as_the_run_is_the_latest_flag(tmp_path, capsys, monkeypatch):
    # `operant monitor latest --follow` was refused as "not a RUN_ID"; it is --latest, as
    # `operant eval latest` takes it (here it gets as far as wanting a terminal)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False)
    monkeypatch.delenv(cli.WEB_DRIVER_ENV, raising=False)
    assert cli.main(["latest", "--follow", "--runs-dir", str(tmp_path)]) == 2
    assert "needs a terminal; use --once or --json" in capsys.readouterr().err
