"""Operant's environments as a library: the env contract (`operant.envs.contract`) and the
families that implement it. Importing this package never imports torch."""
