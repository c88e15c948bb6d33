"""The sweep's Optuna study: its storage, sampler and pruner, and its trials as a leaderboard.

The storage is Optuna's RDB storage: an SQLite file in the sweep directory by default, or a
server's URL (`--storage postgresql://...`) that several `operant sweep` processes, on one
machine or several, share. A study remembers the sweep file it was made from (its user
attribute `spec`): running it again with other parameters or another objective is refused
rather than mixing two searches in one leaderboard.

Trial states beyond Optuna's own are user attributes: `interrupted` (stopped with a
checkpoint, or its sweep process died: re-queued with `resume_of` by the next run of the
sweep), `surplus` (asked for when other processes had already taken the study's n_trials),
`reason` (why it failed or was pruned), `run_base` (its runs' ids without the seed).

A confirmation (operant.trainer.sweep.driver) is a trial of its own, enqueued with the
confirmed trial's parameters and `confirm_of` (that trial's number): it is not one of the
sweep's n_trials, never feeds the pruner, and its value (the objective over its fresh seeds'
runs) becomes the confirmed trial's `confirmed` in the leaderboard.
"""

from __future__ import annotations

import json
import time
from typing import Any

import msgspec

from operant.shared.sweeps import SweepSummary, TrialRow
from operant.trainer.sweep.spec import Sweep, SweepError


def missing_optuna() -> str | None:
    """One line saying what to install when Optuna is not there; None when it is."""
    try:
        import optuna  # noqa: F401
    except ImportError:
        return "operant sweep needs Optuna: pip install 'operant-rl[sweep]'"
    return None


def open_storage(url: str) -> Any:
    """Optuna's RDB storage at `url`, connected; SweepError when it cannot be reached."""
    import optuna
    import sqlalchemy.exc

    given = url
    if url.startswith("postgresql://"):
        # psycopg 3 (the sweep extra's); SQLAlchemy before 2.1 takes psycopg2 for the bare name
        url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
    for attempt in range(1, SCHEMA_ATTEMPTS + 1):
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs=_engine_kwargs(url))
        except ImportError as error:
            raise SweepError(
                f"--storage {redacted(given)}: its database driver is not installed ({error}): "
                "pip install 'operant-rl[sweep]'"
            ) from None
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError) as error:
            # Two processes that create a new database's tables at once: one of them loses
            # the race, and finds the tables there when it tries again.
            problem: BaseException = error
            time.sleep(0.2 * attempt)
        except (sqlalchemy.exc.SQLAlchemyError, ValueError) as error:
            problem = error
            break
    text = str(problem).strip()
    first = text.splitlines()[0] if text else type(problem).__name__
    raise SweepError(f"--storage {redacted(given)} cannot be reached: {first}")


SCHEMA_ATTEMPTS = 5


def _engine_kwargs(url: str) -> dict[str, Any]:
    if url.startswith("sqlite"):
        # A second process of the same sweep may hold the file's write lock for a moment.
        return {"connect_args": {"timeout": 30}}
    return {"pool_pre_ping": True, "connect_args": {"connect_timeout": 10}}


def redacted(url: str) -> str:
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001  (a URL SQLAlchemy cannot parse is shown as given)
        return url


def fingerprint(sweep: Sweep) -> str:
    """What makes two runs of a sweep the same search."""
    table = msgspec.to_builtins(sweep.table)
    table.pop("n_trials", None)
    table.pop("name", None)
    table.pop("confirm", None)  # a finished sweep may be confirmed, or confirmed further
    table.pop("confirm_seeds", None)
    return json.dumps({"sweep": table, "config": sweep.config_data}, sort_keys=True)


def open_study(sweep: Sweep, storage: Any, workers: int) -> Any:
    """The sweep's study, created or loaded; SweepError where it holds another search."""
    import optuna

    from operant.trainer.sweep.pruning import make_pruner

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        storage=storage,
        study_name=sweep.name,
        direction=sweep.direction,
        sampler=_sampler(sweep, workers),
        pruner=make_pruner(sweep),
        load_if_exists=True,
    )
    trials = len(study.get_trials(deepcopy=False))
    if trials and sweep.table.sampler_seed is not None:
        # A continued sweep must not draw its first run's points again.
        study.sampler = _sampler(sweep, workers, offset=trials)
    spec = fingerprint(sweep)
    stored = study.user_attrs.get("spec")
    if stored is None:
        study.set_user_attr("spec", spec)
        study.set_user_attr("metric", sweep.table.objective.metric)
    elif stored != spec:
        raise SweepError(
            f"{sweep.source}: study {sweep.name!r} in this storage was made from another "
            "sweep (other parameters, objective or config): give this one another sweep.name"
        )
    if study.direction.name.lower() != sweep.direction:
        raise SweepError(f"{sweep.source}: study {sweep.name!r} has the other direction")
    for key in ("n_trials", "confirm", "confirm_seeds"):
        if study.user_attrs.get(key) != getattr(sweep.table, key):
            study.set_user_attr(key, getattr(sweep.table, key))
    return study


def _sampler(sweep: Sweep, workers: int, offset: int = 0) -> Any:
    import optuna

    seed = sweep.table.sampler_seed
    seed = seed + offset if seed is not None else None
    if sweep.table.sampler == "cmaes":
        return optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)
    # Several trials run at once: the constant liar keeps them from sampling the same point.
    return optuna.samplers.TPESampler(seed=seed, constant_liar=workers > 1, multivariate=True)


def row_state(trial: Any) -> str:
    """The leaderboard's word for a trial's state."""
    state = trial.state.name.lower()
    attrs = trial.user_attrs
    if state == "fail":
        return (
            "surplus"
            if attrs.get("surplus")
            else ("interrupted" if attrs.get("interrupted") else "failed")
        )
    return state


def confirm_of(trial: Any) -> int | None:
    """The trial a confirmation re-runs; None for one of the sweep's own trials."""
    number = trial.user_attrs.get("confirm_of")
    return None if number is None else int(number)


def summarize(study: Any, storage_text: str) -> SweepSummary:
    """The study as a leaderboard (surplus trials left out)."""
    rows = [_row(trial) for trial in study.get_trials(deepcopy=False)]
    rows = [row for row in rows if row.state != "surplus"]
    confirmations = [row for row in rows if row.confirm_of is not None]
    trials = [row for row in rows if row.confirm_of is None]
    _attach_confirmed(trials, confirmations)
    direction = study.direction.name.lower()
    done = [row for row in trials if row.state == "complete" and row.value is not None]
    count = {state: sum(row.state == state for row in trials) for state in ("pruned", "failed")}
    attrs = study.user_attrs
    return SweepSummary(
        name=study.study_name,
        metric=str(attrs.get("metric", "")),
        direction=direction,
        n_trials=int(attrs.get("n_trials", 0)),
        storage=storage_text,
        complete=len(done),
        pruned=count["pruned"],
        failed=count["failed"],
        running=sum(row.state == "running" for row in rows),
        confirm=int(attrs.get("confirm", 0)),
        confirm_seeds=int(attrs.get("confirm_seeds", 0)),
        confirmed=sum(row.confirmed is not None for row in done),
        confirm_stopped=sum(row.state == "pruned" for row in confirmations),
        best=best_row(done, direction),
        trials=rows,
        updated_at=time.time(),
    )


def best_row(done: list[TrialRow], direction: str) -> TrialRow | None:
    """The best of complete trials: by confirmed value where any is confirmed (a trial's own
    value won the selection, and is biased by it: the confirmation's fresh seeds are not),
    else by value."""
    sign = 1.0 if direction == "minimize" else -1.0
    confirmed = [row for row in done if row.confirmed is not None]
    if confirmed:
        return min(confirmed, key=lambda row: sign * (row.confirmed or 0.0))
    return min(done, key=lambda row: sign * (row.value or 0.0)) if done else None


def _row(trial: Any) -> TrialRow:
    state = row_state(trial)
    return TrialRow(
        number=trial.number,
        state=state,
        value=trial.value if state == "complete" else None,
        params=dict(trial.params),
        run_ids=list(trial.user_attrs.get("run_ids", [])),
        reason=str(trial.user_attrs.get("reason", "")),
        confirm_of=confirm_of(trial),
    )


def _attach_confirmed(trials: list[TrialRow], confirmations: list[TrialRow]) -> None:
    """Each confirmed trial's `confirmed`: its first complete confirmation's value (two
    processes sharing a server may both have confirmed it: docs/sweeps.md, Limits)."""
    by_number = {row.number: row for row in trials}
    for row in sorted(confirmations, key=lambda row: row.number):
        target = by_number.get(row.confirm_of)  # type: ignore[arg-type]
        if row.state == "complete" and target is not None and target.confirmed is None:
            target.confirmed = row.value
