"""`operant bench`: throughput, measured the same way every time.

The package, by what each module owns:
  measure   env_only / trainer / trainer_eval measurements, the overhead bound, --matrix cells;
  arithmetic  the arithmetic bound: a PPO step's FLOPs over this CPU's rates at their shapes;
  compare   --baseline ratios and the exit status a record earns;
  plot      the PNGs of --plot;
  cli       the command line (flags, usage errors, exit codes) and `main`.

`operant bench ...` and `python -m operant.trainer.bench ...` run `main`; the names below stay
importable from `operant.trainer.bench` for scripts written against the single module it was.
"""

from operant.trainer.bench.cli import (
    ENV_ONLY_NUM_ENVS,
    EXIT_PARITY,
    EXIT_USAGE,
    MODES,
    build_parser,
    main,
)
from operant.trainer.bench.compare import EXIT_OK, EXIT_UNSTABLE, compare
from operant.trainer.bench.measure import (
    _timed_rounds,
    arithmetic_bound,
    bench_env_only,
    bench_trainer,
    bench_trainer_eval,
    compute_bound,
    machine,
    summarize,
)
from operant.trainer.bench.plot import PHASE_COLORS, plot

__all__ = [
    "ENV_ONLY_NUM_ENVS",
    "EXIT_OK",
    "EXIT_PARITY",
    "EXIT_UNSTABLE",
    "EXIT_USAGE",
    "MODES",
    "PHASE_COLORS",
    "_timed_rounds",
    "arithmetic_bound",
    "bench_env_only",
    "bench_trainer",
    "bench_trainer_eval",
    "build_parser",
    "compare",
    "compute_bound",
    "machine",
    "main",
    "plot",
    "summarize",
]
