"""The user's environment, fed to every entry point (issue 14, item 2): a device this torch
cannot use, a package an env needs that is not installed, files that are not what they should
be, runs roots that do not exist or are files, ports the exporter cannot have, a config that
cannot fit in memory. Each is the user's input or machine, not a bug: through the real
commands, every one ends in exactly one line on stderr naming what to install or change, exit
status 2, no traceback, and nothing started (no run directory left behind)."""

from __future__ import annotations

import socket

import pytest
import torch
from user_runs import run

CUDA = torch.cuda.is_available()


def box2d_installed() -> bool:
    try:
        import Box2D  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module")
def place(tmp_path_factory):
    """A directory of things that are not what a user meant: a text file given as a runs root
    or a model, random bytes, a TOML file cut short."""
    base = tmp_path_factory.mktemp("user")
    (base / "notes.txt").write_text("not a directory, not a model\n")
    (base / "random.bin").write_bytes(bytes(range(256)) * 12)
    (base / "cut.toml").write_text("[env\nid = ")
    (base / "runs").mkdir()
    (base / "runs" / "not-a-run").mkdir()
    return base


@pytest.fixture(scope="module")
def taken_port():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


# (words, fragments the one line must hold); {base} is the fixture's directory.
TRAIN_CORPUS = [
    (["--set", "train.device=cuda:99"], ["train.device = 'cuda:99'"]),
    (["--set", "train.device=gpu0"], ["train.device = 'gpu0' is not a torch device"]),
    (
        ["--set", "env.num_envs=200000000"],
        ["needs about", "of memory", "env.num_envs = 200,000,000", "available", "lower"],
    ),
    (["--env", "NoSuchEnv-v0"], ["unknown env id 'NoSuchEnv-v0'"]),
    (["--env", "somepackage_not_installed:Thing-v0"], ["cannot import", "install"]),
    (["--config", "{base}/random.bin"], ["random.bin: not valid TOML"]),
    (["--config", "{base}/cut.toml"], ["cut.toml: not valid TOML"]),
    (["--config", "{base}/missing.toml"], ["missing.toml does not exist"]),
    (["--runs-dir", "{base}/notes.txt"], ["notes.txt", "is a file, not a directory"]),
    (["--runs-dir", "{base}/notes.txt/runs"], ["is a file, not a directory"]),
    (["--resume", "no-such-run", "--runs-dir", "{base}/runs"], ["no run 'no-such-run'"]),
    (["--resume", "not-a-run", "--runs-dir", "{base}/runs"], ["no checkpoint"]),
]
if not CUDA:
    TRAIN_CORPUS.append(
        (
            ["--set", "train.device=cuda"],
            ["train.device = 'cuda'", "CPU-only build", "install a CUDA build"],
        )
    )
if not box2d_installed():
    TRAIN_CORPUS.append(
        (
            ["--env", "LunarLander-v3"],
            ["LunarLander-v3", "not installed", 'pip install "gymnasium[box2d]"'],
        )
    )

OTHER_CORPUS = [
    (
        ["operant", "monitor", "--latest", "--once", "--runs-dir", "{base}/nowhere"],
        ["no runs yet under"],
    ),
    (
        ["operant", "monitor", "--latest", "--json", "--runs-dir", "{base}/notes.txt"],
        ["is a file, not a directory"],
    ),
    (["operant", "monitor", "nope", "--once", "--runs-dir", "{base}/runs"], ["no run 'nope'"]),
    (["operant", "monitor", "not-a-run", "--once", "--runs-dir", "{base}/runs"], ["metrics.bin"]),
    (["operant", "runs", "--runs-dir", "{base}/nowhere"], ["nowhere is not there"]),
    (["operant", "runs", "--runs-dir", "{base}/notes.txt"], ["notes.txt is a file"]),
    (["operant", "eval", "{base}/random.bin"], ["is not an operant model or checkpoint"]),
    (["operant", "eval", "{base}/notes.txt"], ["is not an operant model or checkpoint"]),
    (["operant", "eval", "{base}/missing.pt"], ["missing.pt"]),
    (["operant", "eval", "nope", "--runs-dir", "{base}/runs"], ["no run 'nope'"]),
    (["operant", "eval", "not-a-run", "--best", "--runs-dir", "{base}/runs"], ["best.pt"]),
    (
        ["operant", "bench", "trainer", "--set", "train.device=cuda:99", "--seeds", "1"],
        ["train.device = 'cuda:99'"],
    ),
    (
        ["operant", "bench", "trainer", "--set", "env.num_envs=200000000", "--seeds", "1"],
        ["needs about", "of memory", "available"],
    ),
    (
        ["operant", "bench", "env_only", "--num-envs", "2000000000", "--rounds", "1"],
        ["--num-envs 2,000,000,000", "needs about", "available"],
    ),
    (
        ["operant", "bench", "trainer", "--config", "{base}/cut.toml", "--seeds", "1"],
        ["cut.toml: not valid TOML"],
    ),
    (["operant", "exporter", "--listen", "127.0.0.1:99999"], ["between 0 and 65535"]),
    (["operant", "exporter", "--listen", "127.0.0.1:{port}"], ["cannot listen", "--listen"]),
    (["operant", "exporter", "--listen", "192.0.2.1:9464"], ["cannot listen"]),
    (
        ["operant", "exporter", "--runs-dir", "{base}/notes.txt", "--listen", "127.0.0.1:0"],
        ["is a file, not a directory"],
    ),
]
if not box2d_installed():
    OTHER_CORPUS.append(
        (
            ["operant", "bench", "trainer", "--set", "env.id=LunarLander-v3", "--seeds", "1"],
            ["not installed", "box2d"],
        )
    )


def assert_refused(result, fragments, prog):
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert (result.returncode, len(lines)) == (2, 1), (result.returncode, result.stderr)
    assert lines[0].startswith(f"{prog}: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert result.stdout == "", result.stdout


@pytest.mark.parametrize(
    "launcher",
    [["operant-train"], ["operant", "train", "--detach"]],
    ids=["operant-train", "operant train --detach"],
)
@pytest.mark.parametrize(
    "words, fragments", TRAIN_CORPUS, ids=[" ".join(words) for words, _ in TRAIN_CORPUS]
)
def test_training_commands_refuse_the_users_environment(
    place, tmp_path, launcher, words, fragments
):
    root = tmp_path / "fresh-root"
    words = [word.format(base=place) for word in words]
    given_root = [] if "--runs-dir" in words else ["--runs-dir", str(root)]
    result = run(*launcher, *words, *given_root, timeout=120)
    assert_refused(result, fragments, "operant-train")
    # Nothing started: the runs root the command was given holds no run.
    assert not root.exists() or list(root.iterdir()) == []
    assert sorted(path.name for path in (place / "runs").iterdir()) == ["not-a-run"]


@pytest.mark.parametrize(
    "words, fragments",
    OTHER_CORPUS,
    ids=[" ".join(words[1:3]) + " " + words[-1] for words, _ in OTHER_CORPUS],
)
def test_every_other_entry_point_refuses_the_users_environment(place, taken_port, words, fragments):
    words = [word.format(base=place, port=taken_port) for word in words]
    result = run(*words, timeout=120)
    assert_refused(
        result, [fragment.format(port=taken_port) for fragment in fragments], f"operant {words[1]}"
    )
