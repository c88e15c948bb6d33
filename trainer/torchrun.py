"""torchrun, as operant-train --nproc-per-node runs it: `python -m operant.trainer.torchrun
ARGS` is `torchrun ARGS` (torch.distributed.run's own parser and launcher), except that when
ranks fail, it ends with one line naming them, after the ranks' own lines, instead of
torchrun's stack trace and failure table, and exits with the first failed rank's status (2
for bad input, 1 for a failed run, 75 for a full disk: operant-train's codes) rather than 1.
"""

from __future__ import annotations

import sys


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
    try:
        run(args)
    except ChildFailedError as error:
        failures = sorted(error.failures.items())
        # The first rank that exited by itself (the others were then stopped by torchrun).
        codes = [failure.exitcode for _, failure in failures if 0 < failure.exitcode < 256]
        if codes[:1] != [2]:  # bad input (2) is one line, which the rank has said
            named = ", ".join(
                f"rank {rank} (exit status {failure.exitcode})" for rank, failure in failures
            )
            print(f"operant-train: torchrun: {named} failed", file=sys.stderr, flush=True)
        return codes[0] if codes else 1
    except SignalException as stop:
        # torchrun itself was signalled (systemd stopping a unit whose main process it is, or
        # a kill of its pid): it has passed the signal on to the ranks and waited for them
        # (30 s), and they stop as they do on their own signal, at an update boundary with a
        # checkpoint, each saying so. Not a failure, as for operant-train: one line, exit 0.
        name = signal.Signals(stop.sigval).name
        print(f"operant-train: torchrun: stopped by {name}", file=sys.stderr, flush=True)
        return 0 if stop.sigval in (signal.SIGTERM, signal.SIGINT) else 128 + int(stop.sigval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
