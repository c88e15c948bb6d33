"""operant sweep: the sweep file's checks (one line, exit 2, nothing created) and the
objective's arithmetic over update records. In-process and fast: no trainer starts here."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from operant.shared.record import UpdateRecord
from operant.shared.sweeps import TrialRow
from operant.trainer.sweep import objective as obj
from operant.trainer.sweep.cli import main
from operant.trainer.sweep.spec import config_toml, load_sweep
from operant.trainer.sweep.study import best_row

GOOD = """
[sweep]
name = "t"
n_trials = 3
[sweep.params]
"ppo.learning_rate" = { log_uniform = [1e-4, 1e-2] }
"env.num_envs" = { categorical = [32, 64] }
"policy.hidden_sizes" = { categorical = [[32], [64, 64]] }
[train]
total_steps = 5000
"""


def _refused(tmp_path: Path, capsys, text: str, *flags: str) -> str:
    path = tmp_path / "s.toml"
    path.write_text(text)
    runs = tmp_path / "runs"
    status = main([str(path), "--runs-dir", str(runs), *flags])
    err = capsys.readouterr().err
    assert status == 2
    assert not runs.exists(), "a refused sweep created its runs root"
    assert len(err.strip().splitlines()) == 1, err
    return err


def test_good_sweep_file_is_decoded(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text(GOOD)
    sweep = load_sweep(path)
    assert sweep.name == "t" and sweep.direction == "minimize"
    assert sweep.target == 475.0  # CartPole-v1's registered threshold
    assert sweep.table.params["ppo.learning_rate"].log_uniform == [1e-4, 1e-2]
    # 32 envs x 16 steps = 512 a batch: 5,000 steps round up to 10 updates
    assert sweep.trial_budget(["env.num_envs=32"]) == 5120
    assert "total_steps = 5000" in config_toml(sweep.config_data)
    assert (sweep.table.confirm, sweep.confirm_seeds()) == (5, [2, 3, 4])  # after train.seed 1


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ('"ppo.learning_rat" = { uniform = [0.1, 0.2] }', "did you mean `ppo.learning_rate`?"),
        ('"polcy.activation" = { categorical = ["relu"] }', "did you mean `policy.activation`?"),
        ('"ppo.gamma" = { uniform = [0.99, 0.9] }', "[0.99, 0.9] is empty or inverted"),
        ('"ppo.gamma" = { uniform = [0.9, 0.9] }', "empty or inverted"),
        ('"ppo.update_epochs" = { int = [4, 1] }', "sweep.params.ppo.update_epochs.int"),
        ('"env.num_envs" = { categorical = 64 }', "categorical: Expected `array`"),
        ('"ppo.gamma" = { uniform = [0.9, 1.5] }', "the value 1.5 is refused"),
        ('"ppo.learning_rate" = { log_uniform = [0.0, 0.1] }', "low must be above 0"),
        ('"train.seed" = { int = [1, 5] }', "the sweep sets `train.seed`"),
        ('"ppo.gamma" = { uniform = [0.9, 0.99], int = [1, 2] }', "exactly one of"),
    ],
)
def test_bad_params_are_one_line(tmp_path: Path, capsys, params: str, expected: str) -> None:
    err = _refused(tmp_path, capsys, f"[sweep]\n[sweep.params]\n{params}\n")
    assert expected in err, err


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ("confirm = -1", "sweep.confirm: Expected `int` >= 0"),
        ('confirm = "5"', "sweep.confirm: Expected `int`, got `str`"),
        ("confirm = 2.5", "sweep.confirm: Expected `int`, got `float`"),
        ("confirm_seeds = 0", "sweep.confirm_seeds: Expected `int` >= 1"),
    ],
)
def test_bad_confirm_settings_are_one_line(
    tmp_path: Path, capsys, setting: str, expected: str
) -> None:
    err = _refused(tmp_path, capsys, GOOD.replace("n_trials = 3", f"n_trials = 3\n{setting}"))
    assert expected in err, err


def test_the_best_is_the_best_confirmed_value() -> None:
    """Once trials are confirmed, the best is chosen by the confirmation's value (fresh
    seeds), not by the value the search saw, which picked the luckiest run."""
    rows = [
        TrialRow(number=0, state="complete", value=0.30, confirmed=0.60),
        TrialRow(number=1, state="complete", value=0.35, confirmed=0.40),
        TrialRow(number=2, state="complete", value=0.32),
    ]
    assert best_row(rows, "minimize") is rows[1]
    assert best_row(rows, "maximize") is rows[0]
    assert (
        best_row([rows[2], TrialRow(number=3, state="complete", value=0.5)], "minimize")
        is (rows[2])
    )  # none confirmed (confirm = 0): by value, as before


def test_target_needed_where_the_env_has_none(tmp_path: Path, capsys) -> None:
    text = '[env]\nid = "Pendulum-v1"\n[sweep.params]\n"ppo.gamma" = { uniform = [0.9, 0.99] }\n'
    err = _refused(tmp_path, capsys, text)
    assert "time_to_target needs a target return" in err and "Pendulum-v1" in err


def test_unreachable_storage_is_refused(tmp_path: Path, capsys) -> None:
    err = _refused(
        tmp_path, capsys, GOOD, "--storage", "postgresql://nobody:secret@127.0.0.1:1/none"
    )
    assert "cannot be reached" in err and "secret" not in err


def _record(update: int, step: int, ret: float | None, elapsed: float, solved: bool = False):
    """An update's record as progress.jsonl holds it (only what the objectives read varies)."""
    names = UpdateRecord.__struct_fields__
    fields: dict = dict.fromkeys(names[: len(names) - len(UpdateRecord.__struct_defaults__)], 0.0)
    fields.update(
        updates=update,
        global_step=step,
        episodes=update,
        episodes_this_update=1,
        elapsed_s=elapsed,
        episode_return_mean=ret,
        phase_s={},
    )
    if solved:
        fields["solved"] = True
    return UpdateRecord(**fields)


def test_objectives_from_records() -> None:
    records = [
        _record(1, 250, None, 0.1),
        _record(2, 500, 100.0, 0.2),
        _record(3, 750, 480.0, 0.3, True),
    ]
    assert obj.run_value(records, "time_to_target", 1000) == 0.3
    assert obj.run_value(records[:2], "time_to_target", 1000) == pytest.approx(0.4)
    assert obj.run_value(records, "final_return", 1000) == 480.0
    # 0 for the first 250 steps, 100 for the next 250, then 480 held to the budget's end
    assert obj.run_value(records, "return_auc", 1000) == pytest.approx(
        (100 * 250 + 480 * 500) / 1000
    )
    assert obj.finished(records, 1000) and not obj.finished(records[:2], 1000)
    assert obj.aggregate([1.0, 5.0, 2.0], "median") == 2.0
    assert math.isclose(obj.aggregate([1.0, 5.0], "mean"), 3.0)


def test_pruner_reports_on_a_common_grid() -> None:
    records = [_record(1, 100, 10.0, 0.1), _record(2, 200, 20.0, 0.2), _record(3, 350, 30.0, 0.3)]
    # 1,000 steps over 20 points: one point per 50 steps
    points = obj.reports(records, 1000, "maximize")
    assert points[0] == (1, 10.0) and points[-1] == (7, 30.0) and len(points) == 7
    assert obj.reports(records, 1000, "minimize", after=6) == [(7, -30.0)]
    # time_to_target's grid: one point every 0.1 s of training, whatever the batch
    assert obj.reports(records, 1000, "minimize", unit_s=0.1) == [
        (1, -10.0),
        (2, -20.0),
        (3, -30.0),
    ]


def test_the_time_bound_stops_a_trial_that_can_no_longer_be_one_of_the_best(
    tmp_path: Path,
) -> None:
    """time_to_target with one seed: a trial still training at t scores more than t, so once
    five trials are complete (confirm = 5), it stops when t passes the value of the 5th best
    (4 s here) and not before; a confirmation's value is not one of them. A real in-memory
    Optuna study, read as the sweep reads it when a trial ends."""
    import optuna

    from operant.trainer.sweep.pruning import time_bound

    path = tmp_path / "s.toml"
    path.write_text(GOOD.replace("[sweep.params]", "confirm = 5\n[sweep.params]"))
    bound = time_bound(load_sweep(path))
    assert bound is not None and (bound.keep, bound.unit_s) == (5, 0.1)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="minimize")

    def complete(value: float, **attrs: int) -> None:
        trial = study.ask()
        for key, attr in attrs.items():
            trial.set_user_attr(key, attr)
        study.tell(trial, value)
        bound.refresh(study)

    assert not bound.passed(59)  # 5.9 s: past every value below, but none complete yet
    complete(0.5, confirm_of=0)  # a confirmation's value counts for nothing
    for value in (9.0, 8.0, 7.0, 6.0):
        complete(value)
    assert not bound.passed(59)  # four trials complete: any may still be passed
    complete(5.0)  # five complete, the 5th best 9 s: 5.9 s may still be one of the best
    assert bound.limit_s == 9.0 and not bound.passed(59)
    for value in (4.0, 3.0, 2.0, 1.0, 0.0):
        complete(value)  # the 5th best is now 4 s
    assert bound.limit_s == 4.0 and bound.passed(59)
    assert not bound.passed(40) and bound.passed(41)  # 4.0 s may still tie; 4.1 s cannot
    # Two seeds a trial aggregate their values: one seed's time bounds nothing; no pruner,
    # no bound.
    path.write_text(GOOD.replace("[sweep.params]", "seeds = 2\n[sweep.params]"))
    assert time_bound(load_sweep(path)) is None
    path.write_text(GOOD.replace("n_trials = 3", 'n_trials = 3\npruner = "none"'))
    assert time_bound(load_sweep(path)) is None


def test_a_confirmation_stops_once_it_can_no_longer_beat_the_best_confirmed(
    tmp_path: Path,
) -> None:
    """The confirmation stage's bound, on a real in-memory study: with a confirmation
    complete at 0.3 s (median of 3 runs), another stops once two of its three runs are past
    0.3 s (finished, or still training past it: a run's value is at least its seconds), and
    not while the median could still be below; a mean stops once its runs' seconds sum past
    3 x 0.3 s. The trials' own values do not count."""
    import optuna

    from operant.trainer.sweep.pruning import time_bound

    path = tmp_path / "s.toml"
    path.write_text(GOOD.replace("[sweep.params]", "confirm = 2\n[sweep.params]"))
    bound = time_bound(load_sweep(path))
    assert bound is not None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="minimize")
    for value, attrs in ((0.1, {}), (0.3, {"confirm_of": 0}), (0.5, {"confirm_of": 1})):
        trial = study.ask()
        for key, attr in attrs.items():
            trial.set_user_attr(key, attr)
        study.tell(trial, value)
    bound.refresh(study)
    assert bound.confirmed_best == 0.3 and bound.values == [0.1]
    lost = bound.confirmation_lost
    assert not lost([], 0.9, 3, "median")  # one run past 0.3 s: the other two may be below
    assert not lost([0.2], 0.9, 3, "median") and not lost([0.4], 0.25, 3, "median")
    assert lost([0.4], 0.31, 3, "median") and lost([0.4, 0.5], 0.0, 3, "median")
    assert not lost([0.4, 0.2], 0.0, 3, "median")  # the third run decides
    assert lost([0.5, 0.35], 0.06, 3, "mean") and not lost([0.5, 0.35], 0.04, 3, "mean")


def test_the_pruner_is_fed_only_the_points_it_decides_at(tmp_path: Path) -> None:
    """Hyperband decides at its rungs (2, 4, 8, 16, 32, 64 points: each bracket's successive halving
    starts at one of them), the median pruner at every point from its warm-up on (0.3 s, 3
    points of 0.1 s), none without a pruner: the sweep writes no other point to the study."""
    from operant.trainer.sweep.pruning import decides

    path = tmp_path / "s.toml"
    fed = {}
    for pruner in ("hyperband", "median", "none"):
        path.write_text(GOOD.replace("n_trials = 3", f'n_trials = 3\npruner = "{pruner}"'))
        fed[pruner] = [point for point in range(1, 100) if decides(load_sweep(path))(point)]
    assert fed["hyperband"] == [2, 4, 8, 16, 32, 64]
    assert fed["median"] == list(range(3, 100))
    assert fed["none"] == []
