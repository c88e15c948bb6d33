"""The NaN guard belongs to the loop: `Trainer.run` without any log callback (as a benchmark
runs it) stops on the first update that leaves a parameter non-finite, naming it."""

from __future__ import annotations

import math

import pytest

from operant.trainer.config import load_config
from operant.trainer.loop.train import Trainer


def test_run_without_a_log_stops_at_the_first_non_finite_update():
    config = load_config(None, ["env.num_envs=8", "ppo.num_steps=8", "train.total_steps=640"])
    trainer = Trainer(config)
    trainer.policy.weights[0].data[0, 0, 0] = math.nan
    with pytest.raises(
        FloatingPointError, match=r"^non-finite values in parameter weights\.0 after update 1$"
    ):
        trainer.run()
    assert trainer.update == 1 and trainer.last_record is None  # never recorded
