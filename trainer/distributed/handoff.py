"""`operant-train --nproc-per-node K`: check what can be checked here, then become torchrun.

The shortcut is torchrun itself, not a reimplementation: after the checks below it runs
`python -m torch.distributed.run --nproc-per-node K ... -m operant.trainer.run.main <the other
arguments>` and waits for it, passing stop signals to the ranks (`hand_off`). Without
--rdzv-endpoint it is a single-node job (`--standalone`); with one, a node of a multi-node job
(`--nnodes`, `--rdzv-backend c10d`, `--rdzv-endpoint HOST:PORT`, `--rdzv-id`).

Checked first, one line and exit 2 each, nothing started: K >= 1; the config loads and its
env.num_envs (and minibatches) divide over K x nnodes ranks; its device exists, nccl has a GPU
for each of the K ranks, env.workers and env.overlap fit the env (preflight.check_launch); on
one node, a `--resume RUN` names a run; another machine's rendezvous endpoint answers within
train.dist_timeout_s (torchrun itself would retry for ten minutes and then print pages of
stack traces).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

# operant-train's own flags that configure torchrun, and torchrun's spelling of each.
TORCHRUN_FLAGS = {
    "nproc_per_node": "--nproc-per-node",
    "nnodes": "--nnodes",
    "rdzv_endpoint": "--rdzv-endpoint",
    "rdzv_id": "--rdzv-id",
    "max_restarts": "--max-restarts",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "several processes (torchrun; docs/distributed.md)",
        "operant-train --nproc-per-node K hands off to torchrun: K ranks train one run",
    )
    group.add_argument(
        "--nproc-per-node", type=int, metavar="K", help="ranks on this machine (torchrun's)"
    )
    group.add_argument("--nnodes", type=int, metavar="N", help="machines in the job (torchrun's)")
    group.add_argument(
        "--rdzv-endpoint", metavar="HOST:PORT", help="the rendezvous of a multi-node job"
    )
    group.add_argument("--rdzv-id", metavar="ID", help="the job's id, alike on every node")
    group.add_argument(
        "--max-restarts", type=int, metavar="R", help="restart the ranks this often on a failure"
    )


def wanted(args: argparse.Namespace) -> bool:
    """Whether this invocation hands off to torchrun (it is not a rank already)."""
    return args.nproc_per_node is not None and "LOCAL_RANK" not in os.environ


def refusal(args: argparse.Namespace, flags: dict[str, Any]) -> str | None:
    """What is wrong with the command for K ranks, in one line; None when nothing is."""
    from operant.envs import EnvError, resolve_impl
    from operant.trainer.config import ConfigError, derive, load_config
    from operant.trainer.run import preflight

    if args.nproc_per_node < 1:
        return f"--nproc-per-node must be at least 1, got {args.nproc_per_node}"
    nnodes = args.nnodes if args.nnodes is not None else 1
    if nnodes < 1:
        return f"--nnodes must be at least 1, got {nnodes}"
    if args.max_restarts is not None and args.max_restarts < 0:
        return f"--max-restarts must be 0 or more, got {args.max_restarts}"
    if nnodes > 1 and not args.rdzv_endpoint:
        return "--nnodes > 1 needs --rdzv-endpoint HOST:PORT (the same on every node)"
    timeout_s = 300.0
    if args.resume is None or args.config is not None:
        try:
            config = load_config(args.config, args.overrides, flags)
            derive(config, 1, nnodes * args.nproc_per_node)
            preflight.check_launch(
                config, resolve_impl(config.env.id, config.env.impl), args.nproc_per_node
            )
        except (ConfigError, EnvError) as error:
            return str(error)
        timeout_s = config.train.dist_timeout_s
    if args.resume not in (None, "auto") and nnodes == 1:
        # (one node: rank 0 reads the run here; other nodes of a job may not hold it)
        problem = _missing_run(args.resume, args.overrides, flags)
        if problem is not None:
            return problem
    if args.rdzv_endpoint:
        return unreachable(args.rdzv_endpoint, timeout_s)
    return None


def _missing_run(resume: str, overrides: list[str], flags: dict[str, Any]) -> str | None:
    """Why `--resume RUN` names no run, in one line (rank 0 would find the same, after
    torchrun started, and a `--max-restarts` group would try again); None if it does. The
    runs root as rank 0's plan finds it: --runs-dir, a --set of train.runs_dir, the default."""
    from operant.shared import runs
    from operant.trainer.config import ConfigError, load_config

    try:
        root = runs.runs_root(load_config(None, overrides, flags).train.runs_dir)
    except ConfigError as error:
        return str(error)
    try:
        runs.resolve_run(root, None if resume == runs.LATEST_NAME else resume)
    except runs.RunNotFoundError as error:
        return str(error)
    return None


def unreachable(endpoint: str, timeout_s: float) -> str | None:
    """Why a multi-node job's rendezvous endpoint cannot be used, in one line; None when it
    answers, or when it is this machine (torchrun then hosts it). Another node's endpoint
    is tried until train.dist_timeout_s: its node may start a little later than this one."""
    import ipaddress
    import socket
    import time

    host, _, port_text = endpoint.rpartition(":")
    if not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        return f"--rdzv-endpoint {endpoint!r} is not HOST:PORT"
    try:
        addresses = {str(info[4][0]) for info in socket.getaddrinfo(host, int(port_text))}
    except OSError as error:
        return f"--rdzv-endpoint {endpoint}: cannot resolve {host!r} ({error.strerror})"
    local = _local_addresses()
    if any(ipaddress.ip_address(a).is_loopback or a in local for a in addresses):
        return None
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection((host, int(port_text)), timeout=2).close()
            return None
        except OSError as error:
            last = error.strerror or type(error).__name__
        if time.monotonic() >= deadline:
            return (
                f"the rendezvous endpoint {endpoint} did not answer within "
                f"train.dist_timeout_s = {timeout_s:g} s ({last}): start the job on that "
                "node first, or check the host, the port and the firewall"
            )
        time.sleep(0.5)


def _local_addresses() -> set[str]:
    import socket

    try:
        return {str(info[4][0]) for info in socket.getaddrinfo(socket.gethostname(), None)}
    except OSError:
        return set()


def torchrun_command(args: argparse.Namespace, argv: list[str]) -> list[str]:
    """The torchrun command line this invocation becomes (argv without the torchrun flags)."""
    command = [sys.executable, "-m", "operant.trainer.distributed.torchrun"]
    if not args.rdzv_endpoint:
        command.append("--standalone")
    for name, flag in TORCHRUN_FLAGS.items():
        value = getattr(args, name)
        if value is not None:
            command += [flag, str(value)]
    if args.rdzv_endpoint:
        command += ["--rdzv-backend", "c10d"]
    return [*command, "-m", "operant.trainer.run.main", *_without_torchrun_flags(argv)]


def _without_torchrun_flags(argv: list[str]) -> list[str]:
    flags = set(TORCHRUN_FLAGS.values())
    kept: list[str] = []
    skip = False
    for item in argv:
        if skip:
            skip = False
            continue
        name = item.split("=", 1)[0]
        if name in flags:
            skip = "=" not in item
            continue
        kept.append(item)
    return kept


def hand_off(args: argparse.Namespace, argv: list[str]) -> int:
    """Run torchrun and wait for it; its exit status.

    torchrun runs in its own session, and the stop signals this process gets (SIGTERM from
    systemd or kill, SIGINT from Ctrl-C, SIGUSR1 for a checkpoint) go to the ranks, not to
    torchrun: each rank then stops at the group's next update boundary with one checkpoint and
    exits 0, and torchrun, seeing every rank succeed, exits 0 too (a signal sent to torchrun
    itself stops the ranks the same way, and operant.trainer.distributed.torchrun then exits 0 when
    every rank did). If this process dies, the kernel sends torchrun SIGTERM (PR_SET_PDEATHSIG):
    nothing outlives it.
    """
    import signal
    import subprocess

    command = torchrun_command(args, argv)
    sys.stdout.flush()
    sys.stderr.flush()
    torchrun = subprocess.Popen(command, start_new_session=True, preexec_fn=_die_with_parent)

    def forward(number: int, frame: Any) -> None:
        targets = _children(torchrun.pid) or [torchrun.pid]
        for pid in targets:
            try:
                os.kill(pid, number)
            except ProcessLookupError:
                pass

    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGHUP):
        signal.signal(number, forward)
    return torchrun.wait()


def _die_with_parent() -> None:
    """In torchrun's process before exec: SIGTERM when operant-train dies (Linux)."""
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _children(pid: int) -> list[int]:
    """The processes torchrun started (its ranks)."""
    found: list[int] = []
    try:
        tasks = list(os.scandir(f"/proc/{pid}/task"))
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"{task.path}/children") as handle:
                found += [int(child) for child in handle.read().split()]
        except OSError:
            pass
    return found
