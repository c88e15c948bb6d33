"""Data-parallel training under torchrun, as real processes: `operant-train --nproc-per-node 2`
(which becomes torchrun), two torchrun launchers forming one multi-node job over a c10d
rendezvous on localhost, stops by SIGTERM and their resumes, compared bit for bit."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import torch
from user_runs import BIN, command, run, wait_for_updates

from operant.trainer.checkpoint import file_format as checkpoint_format
from operant.trainer.checkpoint.store import find_checkpoint
from operant.trainer.distributed.group import parameter_crc

# Small updates (16 envs x 32 steps, 8 per rank), checkpointed every 4 updates.
CONFIG = [
    "--set",
    "env.num_envs=16",
    "--set",
    "ppo.num_steps=32",
    "--set",
    "ppo.num_minibatches=2",
    "--set",
    "checkpoint.every_updates=4",
    "--set",
    "train.dist_timeout_s=20",
]
UPDATES = 24
BATCH = 16 * 32


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _environ() -> dict[str, str]:
    environ = dict(os.environ)
    environ["OMP_NUM_THREADS"] = "1"  # torchrun's default, without its warning
    return environ


def _train(root: Path, run_id: str, *extra: str, updates: int = UPDATES) -> list[str]:
    return [
        "operant-train",
        "--nproc-per-node",
        "2",
        "--runs-dir",
        str(root),
        "--run-id",
        run_id,
        "--total-steps",
        str(updates * BATCH),
        "--log-format",
        "json",
        *CONFIG,
        *extra,
    ]


def _progress(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "progress.jsonl").read_text().splitlines()]


def _final_policy(run_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "model.pt", weights_only=True)["policy"]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """One uninterrupted 2-rank run: the reference the other tests compare with."""
    root = tmp_path_factory.mktemp("runs")
    done = subprocess.run(
        command(_train(root, "whole")), capture_output=True, text=True, timeout=240, env=_environ()
    )
    return root / "whole", done


def test_two_ranks_train_one_run_with_identical_parameters(two_ranks):
    run_dir, done = two_ranks
    assert done.returncode == 0, done.stderr[-3000:]
    records = _progress(run_dir)
    # Global steps: both ranks' envs, every update.
    assert [r["global_step"] for r in records] == [BATCH * u for u in range(1, UPDATES + 1)]
    summary = json.loads(done.stdout.splitlines()[-1])["summary"]
    assert summary["global_step"] == UPDATES * BATCH
    # One run directory, rank 0's files; the checkpoint holds both ranks' states.
    assert [p.name for p in run_dir.parent.iterdir() if not p.is_symlink()] == ["whole"]
    payload = checkpoint_format.load(find_checkpoint(run_dir / "checkpoints"))
    assert payload["world_size"] == 2 and len(payload["ranks"]) == 1
    zero, one = payload["trainer"], payload["ranks"][0]["trainer"]
    assert zero["counters"]["update"] == UPDATES == one["counters"]["update"]
    for name, tensor in zero["policy"].items():
        assert torch.equal(tensor, one["policy"][name]), name
    # ... but each rank stepped its own envs.
    state_zero, state_one = zero["env"]["arrays"], one["env"]["arrays"]
    assert any(not torch.equal(state_zero[k], state_one[k]) for k in state_zero)
    assert torch.equal(zero["optimizer"]["exp_avg"], one["optimizer"]["exp_avg"])
    run_json = json.loads((run_dir / "run.json").read_text())
    assert run_json["config"]["env"]["num_envs"] == 16
    # Each rank published its own metrics file; the monitor shows them as one run.
    assert sorted(p.name for p in (run_dir / "metrics").iterdir()) == [
        "rank-00000.bin",
        "rank-00001.bin",
    ]
    assert not (run_dir / "metrics.bin").exists()
    shown = subprocess.run(
        command(["operant", "monitor", "--json", "whole", "--runs-dir", str(run_dir.parent)]),
        capture_output=True,
        text=True,
        timeout=60,
    )
    document = json.loads(shown.stdout)
    last = records[-1]
    assert (document["status"], document["world_size"]) == ("finished", 2)
    assert [rank["rank"] for rank in document["ranks"]] == [0, 1]
    assert [rank["global_step"] for rank in document["ranks"]] == [UPDATES * BATCH // 2] * 2
    for key in ("global_step", "episodes", "episode_return_mean"):
        assert document["metrics"][key] == pytest.approx(last[key]), key


def test_the_latency_verdict_compares_the_all_reduce_with_the_arithmetic():
    from operant.trainer.distributed.latency import verdict

    assert verdict(2, allreduce_s=0.0002, minibatch_s=0.0015, steps=24) is None
    said = verdict(4, allreduce_s=0.00084, minibatch_s=0.00007, steps=8)
    assert said is not None and said.startswith("warning: 4 ranks will slow this run")
    assert "each of its 8 minibatch steps an update waits 0.84 ms" in said
    assert "(0.07 ms here)" in said and "\n" not in said


def test_replica_crc_is_the_parameters_bytes():
    a = torch.arange(10, dtype=torch.float32)
    b = a.clone()
    assert parameter_crc(a) == parameter_crc(b)
    b[3] = torch.nextafter(b[3], torch.tensor(100.0))
    assert parameter_crc(a) != parameter_crc(b)


def test_sigterm_then_resume_continues_bit_for_bit(two_ranks, tmp_path):
    """SIGTERM to torchrun: every rank stops at one update boundary, one checkpoint; the
    resumed 2-rank run ends with the uninterrupted run's parameters exactly. The first part
    sums the gradients with gloo, the resumed part and the reference through shared memory
    (train.dist_shared_memory): for two ranks the same bits."""
    reference, _ = two_ranks
    root = tmp_path / "runs"
    log = tmp_path / "log"
    gloo = ("--set", "train.dist_shared_memory=false")
    with open(log, "w") as out:
        launcher = subprocess.Popen(
            command(_train(root, "cut", *gloo)),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=_environ(),
        )
    run_dir = root / "cut"
    wait_for_updates(run_dir, 6)
    launcher.send_signal(signal.SIGTERM)
    assert launcher.wait(timeout=120) == 0  # every rank exited 0, so torchrun did too
    text = log.read_text()
    stopped = [json.loads(line) for line in text.splitlines() if line.startswith('{"summary"')]
    assert stopped and stopped[0]["summary"]["stopped_by"] == "SIGTERM", text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    # A 4-64-64 MLP's minibatch step is shorter than a gloo all-reduce (about a tenth here):
    # the update is latency-bound, and rank 0 says so once, at start, and trains on.
    slow = [line for line in text.splitlines() if "ranks will slow this run" in line]
    assert len(slow) == 1 and slow[0].startswith("operant-train: warning: 2 ranks"), slow
    assert "each of its 4 minibatch steps an update waits" in slow[0]
    cut_at = stopped[0]["summary"]["global_step"] // BATCH
    assert 6 <= cut_at < UPDATES
    assert find_checkpoint(run_dir / "checkpoints").name.endswith(f"{cut_at:08d}.pt")
    resumed = run(*_train(root, "cut", "--resume", "cut"), env=_environ())
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [r["update"] for r in _progress(run_dir)] == list(range(1, UPDATES + 1))
    theirs, ours = _final_policy(reference), _final_policy(run_dir)
    for name, tensor in theirs.items():
        assert torch.equal(tensor, ours[name]), name


def _signal_torchrun(tmp_path: Path, run_id: str, sig: int) -> tuple[int, str]:
    """A 2-rank run whose torchrun process itself gets `sig` after 3 updates (as systemd's
    stop does to a unit whose main process it is): the launcher's exit status and output."""
    import psutil

    root = tmp_path / "runs"
    log = tmp_path / "log"
    with open(log, "w") as out:
        launcher = subprocess.Popen(
            command(_train(root, run_id, updates=400)),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=_environ(),
        )
    wait_for_updates(root / run_id, 3)
    (torchrun,) = [
        child
        for child in psutil.Process(launcher.pid).children()
        if "operant.trainer.distributed.torchrun" in " ".join(child.cmdline())
    ]
    torchrun.send_signal(sig)
    return launcher.wait(timeout=120), log.read_text()


def test_sigterm_to_torchrun_itself_is_a_clean_stop(tmp_path):
    """torchrun passes SIGTERM to the ranks, which checkpoint and stop; its own
    SignalException was a traceback and exit 1 (a unit left failed)."""
    status, text = _signal_torchrun(tmp_path, "cut", signal.SIGTERM)
    assert status == 0
    assert "Traceback" not in text and "death signal" not in text, text[-3000:]
    assert text.count("SIGTERM: stopping at the next update boundary") == 1, text[-3000:]
    assert text.endswith("operant-train: torchrun: stopped by SIGTERM\n"), text[-3000:]
    stopped = [json.loads(line) for line in text.splitlines() if line.startswith('{"summary"')]
    assert stopped[0]["summary"]["stopped_by"] == "SIGTERM"
    assert find_checkpoint(tmp_path / "runs" / "cut" / "checkpoints") is not None


def test_sighup_to_torchrun_is_a_clean_stop_too(tmp_path):
    """SIGHUP to torchrun (the terminal of a foreground group closed): it passes SIGHUP on,
    which the ranks take as a stop with a checkpoint (they did not catch it before)."""
    status, text = _signal_torchrun(tmp_path, "hup", signal.SIGHUP)
    assert status == 0, text[-3000:]
    assert text.endswith("operant-train: torchrun: stopped by SIGHUP\n"), text[-3000:]
    assert find_checkpoint(tmp_path / "runs" / "hup" / "checkpoints") is not None


def test_a_signal_to_torchrun_that_kills_the_ranks_is_not_a_clean_stop(tmp_path):
    """SIGQUIT to torchrun: it passes it on, and the ranks die of it (no checkpoint);
    "stopped" and exit 0 would tell systemd a clean stop."""
    status, text = _signal_torchrun(tmp_path, "quit", signal.SIGQUIT)
    assert status == 128 + signal.SIGQUIT, text[-3000:]
    assert text.endswith(
        "operant-train: torchrun: ended by SIGQUIT; local rank 0 (exit status -3), local rank 1 "
        "(exit status -3) did not stop with a checkpoint\n"
    ), text[-3000:]


def test_two_torchrun_launchers_form_one_multi_node_run(tmp_path):
    """`--nnodes 2` with a c10d rendezvous: two launchers (one rank each) train one run."""
    endpoint = f"localhost:{_free_port()}"
    root = tmp_path / "runs"
    launchers = [
        subprocess.Popen(
            [
                str(BIN / "torchrun"),
                "--nnodes",
                "2",
                "--nproc-per-node",
                "1",
                "--rdzv-backend",
                "c10d",
                "--rdzv-endpoint",
                endpoint,
                "--rdzv-id",
                "multi",
                "-m",
                "operant.trainer.run.main",
                "--runs-dir",
                str(root),
                "--total-steps",
                str(8 * BATCH),
                "--quiet",
                *CONFIG,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=_environ(),
        )
        for _ in range(2)
    ]
    outputs = [launcher.communicate(timeout=240)[0] for launcher in launchers]
    assert [launcher.returncode for launcher in launchers] == [0, 0], outputs
    (run_dir,) = [p for p in root.iterdir() if not p.is_symlink()]
    assert run_dir.name == "cartpole-v1-multi"  # the run id follows the rendezvous id
    records = _progress(run_dir)
    assert records[-1]["global_step"] == 8 * BATCH and len(records) == 8
    payload = checkpoint_format.load(find_checkpoint(run_dir / "checkpoints"))
    assert payload["world_size"] == 2


def test_bad_rank_counts_are_refused_before_anything_starts(tmp_path):
    root = tmp_path / "runs"
    zero = run("operant-train", "--nproc-per-node", "0", "--runs-dir", str(root))
    assert zero.returncode == 2
    assert zero.stderr.strip() == "operant-train: --nproc-per-node must be at least 1, got 0"
    uneven = run(
        *("operant-train", "--nproc-per-node", "3", "--runs-dir", str(root)),
        *("--set", "env.num_envs=16"),
    )
    assert uneven.returncode == 2
    assert uneven.stderr.strip() == (
        "operant-train: env.num_envs = 16 is the run's total over 3 ranks, each stepping the "
        "same share: make it a multiple of 3"
    )
    away = run(
        *("operant-train", "--nproc-per-node", "1", "--nnodes", "2", "--runs-dir", str(root)),
        *("--rdzv-endpoint", "192.0.2.1:29400", "--set", "train.dist_timeout_s=1"),
    )
    assert away.returncode == 2
    assert (
        away.stderr.startswith(
            "operant-train: the rendezvous endpoint 192.0.2.1:29400 did not answer within "
            "train.dist_timeout_s = 1 s ("
        )
        and len(away.stderr.strip().splitlines()) == 1
    )
    assert not root.exists()


def test_resuming_a_missing_run_is_refused_before_ranks_start(tmp_path):
    # rank 0 found it after torchrun started, and --max-restarts 2 tried three times (14 s)
    root = tmp_path / "runs"
    result = run("operant-train", "--nproc-per-node", "2", "--max-restarts", "2",
                 "--resume", "nosuch", "--runs-dir", str(root))  # fmt: skip
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        f"operant-train: no run 'nosuch' under {root} (see `operant runs --runs-dir {root}`)\n"
    )


def test_a_ranks_refusal_is_its_one_line(tmp_path):
    # What only rank 0 can find (here: a checkpoint written by one process) is its one line
    # and exit 2, without torchrun's "rank 0 (exit status 2), rank 1 ... failed" after it.
    root = tmp_path / "runs"
    alone = run("operant-train", "--total-steps", "2048", "--run-id", "alone", "--runs-dir",
                str(root), "--quiet")  # fmt: skip
    assert alone.returncode == 0, alone.stderr
    result = run("operant-train", "--nproc-per-node", "2", "--resume", "alone", "--runs-dir",
                 str(root), env=_environ())  # fmt: skip
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "operant-train: ckpt-000000001.pt was written by 1 rank(s) and this is 2: resume it "
        f"with operant-train --resume alone --runs-dir {root}\n"
    )


def test_a_network_every_rank_refuses_is_said_once(tmp_path):
    # Each rank builds its trainer and tries the network there (the launcher builds no env):
    # two ranks said the same refusal, run together on one line.
    root = tmp_path / "runs"
    result = run("operant-train", "--nproc-per-node", "2", "--runs-dir", str(root),
                 "--set", "policy.kind=nowhere:Agent", env=_environ())  # fmt: skip
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "operant-train: policy.kind = 'nowhere:Agent': no module named 'nowhere' on sys.path "
        "or in the current folder; run this where the module is, or install it\n"
    )
    assert not root.exists()


def test_refusals_of_some_ranks_are_each_named(capsys):
    from operant.trainer.distributed.ranks import _say_refusals

    _say_refusals(["no GPU 1 here", None, "no GPU 1 here"])
    _say_refusals(["a", "b"])
    _say_refusals(None)  # a rank other than 0 says nothing
    assert capsys.readouterr().err == (
        "operant-train[rank 0]: no GPU 1 here\noperant-train[rank 2]: no GPU 1 here\n"
        "operant-train[rank 0]: a\noperant-train[rank 1]: b\n"
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="refusals of a machine without CUDA")
@pytest.mark.parametrize(
    ("overrides", "start"),
    [
        # (each was a traceback from every rank, exit 1: Group's cuda.set_device, or the env)
        (["train.device=cuda"], "train.device = 'cuda', but this torch"),
        (["train.dist_backend=nccl"], "train.dist_backend nccl needs CUDA GPUs"),
        (["env.id=MinAtar-Breakout-v1", "env.overlap=true"], "env.overlap = true is for the"),
        (["env.num_envs=6", "env.overlap=true", "ppo.num_minibatches=1"],
         "env.overlap = true splits each rank's envs into two halves"),
    ],
)  # fmt: skip
def test_what_a_lone_trainer_refuses_is_refused_before_ranks_start(tmp_path, overrides, start):
    root = tmp_path / "runs"
    sets = [word for override in overrides for word in ("--set", override)]
    result = run("operant-train", "--nproc-per-node", "2", "--runs-dir", str(root), *sets)
    assert (result.returncode, result.stdout) == (2, "")
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"operant-train: {start}")
    assert not root.exists()


def test_a_stopped_rank_ends_the_run_with_the_timeout_message(tmp_path):
    """SIGSTOP one rank: the other gives up after train.dist_timeout_s and says why."""
    root = tmp_path / "runs"
    log = tmp_path / "log"
    with open(log, "w") as out:
        launcher = subprocess.Popen(
            command(_train(root, "stuck", "--set", "train.dist_timeout_s=3", updates=10_000)),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=_environ(),
        )
    wait_for_updates(root / "stuck", 2)
    rank_one = _rank_pid(launcher.pid, 1)
    os.kill(rank_one, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 60
        while "train.dist_timeout_s = 3 s" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
    finally:
        os.kill(rank_one, signal.SIGKILL)
    launcher.wait(timeout=120)
    text = log.read_text()
    assert "operant-train: training failed: rank 0:" in text
    assert launcher.returncode != 0


def _rank_pid(launcher: int, rank: int) -> int:
    """The pid of the descendant of `launcher` (operant-train, then torchrun) that runs
    `rank`."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for pid in _descendants(launcher):
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if f"RANK={rank}".encode() in environ:
                return pid
        time.sleep(0.1)
    raise AssertionError(f"no rank {rank} under pid {launcher}")


def _descendants(pid: int) -> list[int]:
    found = _children(pid)
    for child in list(found):
        found += _descendants(child)
    return found


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return found


def _read_until(run_dir: Path, predicate, timeout_s: float = 10.0):
    """The run as the monitor reads it (operant.shared.ranks) once `predicate` holds."""
    from operant.shared.ranks import RunReader

    deadline = time.monotonic() + timeout_s
    with RunReader(run_dir) as reader:
        while True:
            run = reader.read()
            if predicate(run) or time.monotonic() > deadline:
                return run
            time.sleep(0.01)


def test_a_killed_rank_restarts_the_group_which_resumes_by_itself(tmp_path):
    """SIGKILL of one rank under `--max-restarts 1`: torchrun restarts both ranks, which
    resume from the newest checkpoint (at most checkpoint.every_updates lost) and finish."""
    root = tmp_path / "runs"
    log = tmp_path / "log"
    torchrun = [
        str(BIN / "torchrun"),
        *("--standalone", "--nproc-per-node", "2", "--max-restarts", "1"),
        *("--monitor-interval", "1", "-m", "operant.trainer.run.main"),
    ]
    trainer_args = _train(root, "phoenix", updates=40)[3:]  # without --nproc-per-node 2
    with open(log, "w") as out:
        launcher = subprocess.Popen(
            [*torchrun, *trainer_args], stdout=out, stderr=subprocess.STDOUT, env=_environ()
        )
    run_dir = root / "phoenix"
    wait_for_updates(run_dir, 10)
    os.kill(_rank_pid(launcher.pid, 1), signal.SIGKILL)
    killed_at = len(_progress(run_dir))
    # Meanwhile (until torchrun restarts the group), the monitor names the dead rank.
    seen = _read_until(run_dir, lambda run: run.total.status == "crashed")
    assert (seen.total.status, seen.status_ranks) == ("crashed", (1,))
    assert (seen.ranks[1].rank, seen.ranks[1].status) == (1, "crashed")
    assert seen.ranks[0].status in ("running", "failed")  # its next collective fails
    newest = find_checkpoint(run_dir / "checkpoints")
    assert launcher.wait(timeout=240) == 0, log.read_text()[-3000:]
    # rank 0 saw its peer's process end in its next collective, not at train.dist_timeout_s:
    # through the shared segment (the gradient's, the record's) or gloo's closed socket (the
    # checkpoint's gather of the ranks' states)
    said = [line for line in log.read_text().splitlines() if "training failed: rank 0" in line]
    assert len(said) == 1 and (
        "rank 1's process ended during a collective through shared memory" in said[0]
        or "gloo/transport/" in said[0]  # gloo's transport error: a closed or reset socket
    ), said
    resumed_from = int(newest.stem.rsplit("-", 1)[-1])
    assert killed_at - resumed_from <= 4 + 1  # the interval, and the update under way
    assert [r["update"] for r in _progress(run_dir)] == list(range(1, 41))
    payload = checkpoint_format.load(find_checkpoint(run_dir / "checkpoints"))
    assert payload["trainer"]["counters"]["update"] == 40


def test_a_non_finite_loss_on_one_rank_stops_every_rank_with_the_reason(tmp_path):
    """Rank 1's rewards turn NaN: the averaged gradient is non-finite on every rank, so every
    rank's NaN guard stops at the same update; the run is marked failed with the reason."""
    root = tmp_path / "runs"
    environ = _environ()
    environ["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).parent), environ.get("PYTHONPATH", "")]
    )
    done = subprocess.run(
        command(
            [
                *_train(root, "poisoned", updates=20)[: -len(CONFIG)],
                *("--env", "nan_env:NanOnRankOne-v0", "--set", "env.impl=reference"),
                *("--set", "env.num_envs=4", "--set", "ppo.num_steps=16"),
                *("--set", "ppo.num_minibatches=2", "--set", "checkpoint.every_updates=1"),
            ]
        ),
        capture_output=True,
        text=True,
        timeout=240,
        env=environ,
    )
    assert done.returncode != 0
    assert "operant-train: training failed: non-finite values in parameter" in done.stderr
    assert "the last good checkpoint is" in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().endswith("failed")  # torchrun's line: which ranks failed
    payload = checkpoint_format.load(find_checkpoint(root / "poisoned" / "checkpoints"))
    assert all(
        bool(torch.isfinite(tensor).all()) for tensor in payload["trainer"]["policy"].values()
    )


def test_gloos_sign_off_stays_out_of_a_groups_error():
    from operant.trainer.distributed.group import _first_line

    error = RuntimeError(
        "[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
        "[127.0.0.1]:40512. Check the logs of the remote worker before reporting an error. "
        "GLHF! \N{UMBRELLA ON GROUND}\nmore"
    )
    assert _first_line(error) == (
        "[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
        "[127.0.0.1]:40512"
    )


def test_a_group_error_under_restarts_left_does_not_say_the_run_ends(monkeypatch):
    # "so the run ends", then torchrun restarted the group and the run resumed
    from operant.trainer.distributed.group import _what_ends

    monkeypatch.delenv("TORCHELASTIC_MAX_RESTARTS", raising=False)
    assert _what_ends() == "the run ends"
    monkeypatch.setenv("TORCHELASTIC_MAX_RESTARTS", "2")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    assert _what_ends() == "this start of the group ends (torchrun restarts it: 2 of 2)"
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "2")
    assert _what_ends() == "the run ends"
