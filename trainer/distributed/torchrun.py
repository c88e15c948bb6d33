"""torchrun, as operant-train --nproc-per-node runs it: `python -m
operant.trainer.distributed.torchrun
ARGS` is `torchrun ARGS` (torch.distributed.run's own parser and launcher), except that when
ranks fail, it ends with one line naming them, after the ranks' own lines, instead of
torchrun's stack trace and failure table, and exits with the first failed rank's status (2
for bad input, 1 for a failed run, 75 for a full disk: operant-train's codes) rather than 1.
"""

from __future__ import annotations

import sys
from typing import Any


def main(argv: list[str] | None = None) -> int:
    import logging
    import os

    # One intra-op thread per rank, as torchrun sets it, without its warning about it.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import signal

    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    # Its per-rank failure log line: the ranks said why, and the line below names them.
    logging.getLogger("torch.distributed.elastic.multiprocessing.api").setLevel(logging.CRITICAL)
    # Its "Received 15 death signal, shutting down workers": the ranks and the line below say it.
    logging.getLogger("torch.distributed.elastic.agent.server.api").setLevel(logging.ERROR)
    args = parse_args(sys.argv[1:] if argv is None else argv)
    ended = _record_shutdown()
    try:
        run(args)
    except ChildFailedError as error:
        failures = sorted(error.failures.items())
        # The first rank that exited by itself (the others were then stopped by torchrun).
        codes = [failure.exitcode for _, failure in failures if 0 < failure.exitcode < 256]
        # Bad input (2) is one line, which the rank that found it has said (rank 0 for the
        # config and the plan, each rank for its own device); the others were then stopped.
        if codes[:1] != [2]:
            named = ", ".join(
                f"rank {rank} (exit status {failure.exitcode})" for rank, failure in failures
            )
            print(f"operant-train: torchrun: {named} failed", file=sys.stderr, flush=True)
        return codes[0] if codes else 1
    except SignalException as stop:
        return _stopped(signal.Signals(stop.sigval), ended)
    return 0


def _record_shutdown() -> dict[int, int | None]:
    """Where torchrun's agent, signalled itself, ends its ranks (it passes the signal on, waits
    up to 30 s, then SIGKILLs those left): their exit statuses by local rank, recorded as it
    ends them (its own exception carries none)."""
    from torch.distributed.elastic.multiprocessing.api import SubprocessContext

    ended: dict[int, int | None] = {}
    close = SubprocessContext._close

    def recording_close(self: Any, death_sig: Any, timeout: int = 30) -> None:
        close(self, death_sig=death_sig, timeout=timeout)
        for rank, handler in getattr(self, "subprocess_handlers", {}).items():
            ended[int(rank)] = handler.proc.poll()

    SubprocessContext._close = recording_close  # type: ignore[method-assign]
    return ended


def _stopped(sig: Any, ended: dict[int, int | None]) -> int:
    """torchrun itself was signalled (systemd stopping a unit whose main process it is, or a
    kill of its pid). SIGTERM, SIGINT and SIGHUP stop the ranks as their own signal does, at
    an update boundary with a checkpoint, each saying so: when every rank then exited 0, one
    line and exit 0, as operant-train's own stop. Otherwise the ranks that did not stop so are
    named."""
    import signal

    unclean = {rank: code for rank, code in sorted(ended.items()) if code != 0}
    clean = sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP) and ended and not unclean
    if clean:
        print(f"operant-train: torchrun: stopped by {sig.name}", file=sys.stderr, flush=True)
        return 0
    named = ", ".join(f"local rank {rank} (exit status {code})" for rank, code in unclean.items())
    print(
        f"operant-train: torchrun: ended by {sig.name}"
        + (f"; {named} did not stop with a checkpoint" if named else ""),
        file=sys.stderr,
        flush=True,
    )
    codes = [code for code in unclean.values() if code is not None and 0 < code < 256]
    return codes[0] if codes else 128 + int(sig)


if __name__ == "__main__":
    sys.exit(main())
