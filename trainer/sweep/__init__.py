"""`operant sweep`: hyperparameter search with Optuna, each trial's seeds ordinary runs.

The sweep file and its checks (`spec`), the objective and the pruner's feed (`objective`),
a trial's run processes (`trials`, forked from a server that imported torch once: `preload`),
the study (`study`), the loop (`driver`), the command lines (`cli`, `show`). docs/sweeps.md.
"""
