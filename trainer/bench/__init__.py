"""`operant bench`: throughput, measured the same way every time.

The package, by what each module owns:
  measure   env_only / trainer / trainer_eval measurements, the overhead bound, --matrix cells;
  arithmetic  the arithmetic bound: a PPO step's FLOPs over this CPU's rates at their shapes;
  compare   --baseline ratios and the exit status a record earns;
  plot      the PNGs of --plot;
  cli       the command line (flags, usage errors, exit codes) and `main`.

`operant bench ...` and `python -m operant.trainer.bench ...` run `cli.main`.
"""
