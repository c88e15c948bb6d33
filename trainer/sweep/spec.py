"""What a sweep file asks for, decoded and checked before anything is created.

A sweep file is a config file (the sections operant-train reads) with a `[sweep]` table:

    [sweep]
    name = "cartpole"              # default: the file's name without .toml
    base = "CartPole-v1.toml"      # optional config file under this one, relative to it
    n_trials = 64
    seeds = 1                      # runs per trial: train.seed, train.seed + 1, ...
    sampler = "tpe"                # or "cmaes"
    pruner = "median"              # or "hyperband", "none"
    confirm = 5                    # the best 5 trials re-run on fresh seeds (0: none)
    confirm_seeds = 3

    [sweep.objective]
    metric = "time_to_target"      # or "final_return", "return_auc"
    target = 475.0                 # time_to_target's; default train.target_return or the env's

    [sweep.params]
    "ppo.learning_rate" = { log_uniform = [1e-4, 3e-2] }
    "env.num_envs" = { categorical = [32, 64, 128] }

`load_sweep` decodes the table with msgspec, checks every parameter path against the config's
Structs (an unknown one with "did you mean"), every range and choice against the config's own
types (each end is converted as a `--set` would be), and the objective's target; a SweepError
names the file and field in one line.
"""

from __future__ import annotations

import math
import tomllib
import typing
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Struct

from operant.trainer.config import (
    Config,
    ConfigError,
    closest_field,
    derive,
    toml_value,
)

Pair = Annotated[list[float], Meta(min_length=2, max_length=2)]
IntPair = Annotated[list[int], Meta(min_length=2, max_length=2)]

METRICS = ("time_to_target", "final_return", "return_auc")
DEFAULT_DIRECTION: dict[str, Literal["minimize", "maximize"]] = {
    "time_to_target": "minimize",
    "final_return": "maximize",
    "return_auc": "maximize",
}
SWEEP_OWN = {"train.seed", "train.run_id", "train.runs_dir"}
"""Config paths the sweep sets itself for each run."""


class SweepError(ValueError):
    """Bad sweep input; the message names the file and field."""


class Param(Struct, forbid_unknown_fields=True, kw_only=True):
    """One parameter's distribution: exactly one of these."""

    log_uniform: Pair | None = None
    """[low, high], 0 < low < high, sampled uniformly in log space."""
    uniform: Pair | None = None
    """[low, high], low < high."""
    int_range: IntPair | None = msgspec.field(default=None, name="int")
    """[low, high] integers, both included."""
    categorical: Annotated[list[Any], Meta(min_length=1)] | None = None
    """The values to choose from (numbers, strings, booleans, or arrays of them)."""


class Objective(Struct, forbid_unknown_fields=True, kw_only=True):
    metric: Literal["time_to_target", "final_return", "return_auc"] = "time_to_target"
    """time_to_target: training seconds until the mean return of the last 100 episodes
    reaches `target` (a run that never does scores twice the seconds it trained);
    final_return: that mean when the run ends; return_auc: its mean over the run's budget."""
    direction: Literal["minimize", "maximize"] | None = None
    """Default: minimize a time, maximize a return."""
    target: float | None = None
    """For time_to_target: default train.target_return, else the env's reward threshold."""
    aggregate: Literal["median", "mean"] = "median"
    """How a trial's seeds' values make the trial's."""
    report_every_s: Annotated[float, Meta(gt=0, le=3600)] = 0.1
    """time_to_target: the pruner compares trials' returns at every this many seconds of
    training (about a twentieth of a trial's time is right; other objectives compare them
    at every 1/20 of the step budget)."""


class SweepTable(Struct, forbid_unknown_fields=True, kw_only=True):
    name: str | None = None
    base: str | None = None
    n_trials: Annotated[int, Meta(gt=0)] = 32
    seeds: Annotated[int, Meta(gt=0, le=1000)] = 1
    sampler: Literal["tpe", "cmaes"] = "tpe"
    sampler_seed: int | None = None
    pruner: Literal["median", "hyperband", "none"] = "median"
    confirm: Annotated[int, Meta(ge=0, le=1000)] = 5
    """After n_trials, the best this many trials' configs are re-run on fresh seeds, and the
    best of those medians is the sweep's best (operant.trainer.sweep.driver); 0: none."""
    confirm_seeds: Annotated[int, Meta(gt=0, le=1000)] = 3
    """Runs per confirmation, on seeds no trial used (after the trials' own `seeds`)."""
    objective: Objective = msgspec.field(default_factory=Objective)
    params: dict[str, Param] = msgspec.field(default_factory=dict)


class Sweep(Struct, kw_only=True):
    """A checked sweep: its table, the raw config the trials train, and derived facts."""

    name: str
    table: SweepTable
    config_data: dict[str, Any]
    """The base config's tables as written (TOML values: no None), without [sweep]."""
    config: Config
    direction: Literal["minimize", "maximize"]
    target: float | None
    source: str

    @property
    def report_unit_s(self) -> float | None:
        """The pruner's grid in seconds of training, or None for a grid of steps."""
        objective = self.table.objective
        return objective.report_every_s if objective.metric == "time_to_target" else None

    def trial_budget(self, overrides: list[str]) -> int:
        """The steps each run of a trial with these --set assignments trains (its
        train.total_steps rounded up to whole updates of its batch); ConfigError (a
        ValueError) where the config refuses the combination."""
        try:
            config = _with(self.config_data, overrides)
        except msgspec.ValidationError as error:
            raise ConfigError(_where(error, "config")) from None
        return derive(config, world_size=1).total_steps

    def confirm_seeds(self) -> list[int]:
        """A confirmation's seeds: the next ones after every trial's (train.seed + i for i
        below `seeds`), so that no run a trial was chosen by is counted again."""
        first = self.config.train.seed + self.table.seeds
        return [first + i for i in range(self.table.confirm_seeds)]

    def best_toml(self, params: dict[str, Any], header: str) -> str:
        """The trials' config with `params` (a trial's, as the study holds them) set, and the
        target the trials stopped at: a file operant-train --config reads."""
        sets = [assignment(self, path, value) for path, value in params.items()]
        if self.table.objective.metric == "time_to_target":  # as the trials trained: to it
            sets.append(f"train.target_return={self.target!r}")
        return config_toml(_with_data(self.config_data, sets), header)


def load_sweep(path: str | Path) -> Sweep:
    """The sweep that file `path` describes; SweepError in one line if it is not right."""
    path = Path(path)
    data = _read_toml(path)
    raw = data.pop("sweep", None)
    if not isinstance(raw, dict):
        raise SweepError(f"{path}: no [sweep] table: add one with sweep.params (docs/sweeps.md)")
    params = raw.pop("params", {})
    try:
        table = msgspec.convert(raw, SweepTable)
    except msgspec.ValidationError as error:
        raise SweepError(f"{path}: {_where(error, 'sweep')}") from None
    table.params = _params(path, params)
    if table.base is not None:
        base = _read_toml(path.parent / table.base)
        base.pop("sweep", None)
        data = _merged(base, data)
    name = table.name or path.stem
    if not name or not all(c.isalnum() or c in "._-" for c in name) or name[0] in ".-":
        raise SweepError(f"{path}: sweep.name {name!r} may use letters, digits, '.', '_', '-'")
    if not table.params:
        raise SweepError(f"{path}: sweep.params is empty: name at least one config path")
    config = _config(path, data)
    for param_path, param in table.params.items():
        _check_param(path, data, param_path, param)
    direction = table.objective.direction or DEFAULT_DIRECTION[table.objective.metric]
    target = _target(path, table.objective, config)
    return Sweep(
        name=name,
        table=table,
        config_data=data,
        config=config,
        direction=direction,
        target=target,
        source=str(path),
    )


def _params(path: Path, raw: Any) -> dict[str, Param]:
    """sweep.params, each decoded on its own so that an error names its path."""
    if not isinstance(raw, dict):
        raise SweepError(f"{path}: sweep.params must be a table of config path = distribution")
    params = {}
    for name, value in raw.items():
        try:
            params[name] = msgspec.convert(value, Param)
        except msgspec.ValidationError as error:
            raise SweepError(f"{path}: {_where(error, f'sweep.params.{name}')}") from None
    return params


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise SweepError(f"sweep file {path} does not exist") from None
    except OSError as error:
        raise SweepError(f"{path} cannot be read: {error.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise SweepError(f"{path}: not valid TOML: {error}") from None


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    merged = {key: dict(value) if isinstance(value, dict) else value for key, value in base.items()}
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key].update(value)
        else:
            merged[key] = value
    return merged


def _where(error: msgspec.ValidationError, prefix: str) -> str:
    """msgspec's 'message - at `$.params.x`' as 'sweep.params.x: message'."""
    message, _, where = str(error).rpartition(" - at `")
    if not message:
        return f"{prefix}: {error}"
    field = where.rstrip("`").removeprefix("$").lstrip(".")
    field = field.replace("int_range", "int")
    message = message.replace(" | null", "")  # every distribution's field is optional
    message = message.replace("Object contains unknown field", "unknown key")
    return f"{prefix}.{field}: {message}" if field else f"{prefix}: {message}"


def _config(path: Path, data: dict[str, Any]) -> Config:
    """The config of `data`, checked as a run's is."""
    try:
        config = msgspec.convert(data, Config)
        derive(config, world_size=1)
    except msgspec.ValidationError as error:
        raise SweepError(f"{path}: {_where(error, 'config')}") from None
    except ConfigError as error:
        raise SweepError(f"{path}: {error}") from None
    return config


def _with(data: dict[str, Any], overrides: list[str]) -> Config:
    return msgspec.convert(_with_data(data, overrides), Config)


def _with_data(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    import copy as copying

    from operant.trainer.config import apply_override

    # Deep: an env.options.KEY assignment writes into the nested table, which must not be
    # the sweep's own (its checks try every range end and choice on it).
    copy = copying.deepcopy(data)
    for override in overrides:
        apply_override(copy, override)
    return copy


def assignment(sweep: Sweep, path: str, value: Any) -> str:
    """A parameter's value, as the study holds it, as a --set assignment: a categorical of
    arrays (policy.hidden_sizes) is held as its TOML text, and goes as written."""
    choices = sweep.table.params[path].categorical or []
    if any(isinstance(choice, list) for choice in choices):
        return f"{path}={value}"
    return f"{path}={toml_value(value)}"


def _check_param(path: Path, data: dict[str, Any], name: str, param: Param) -> None:
    where = f"{path}: sweep.params.{name}"
    _check_path(where, name)
    given = [
        field
        for field in ("log_uniform", "uniform", "int_range", "categorical")
        if getattr(param, field) is not None
    ]
    if len(given) != 1:
        raise SweepError(f"{where}: give exactly one of log_uniform, uniform, int, categorical")
    kind = given[0]
    values = getattr(param, kind)
    if kind != "categorical":
        low, high = values
        label = "int" if kind == "int_range" else kind
        if not (math.isfinite(low) and math.isfinite(high) and low < high):
            raise SweepError(
                f"{where}.{label}: [{low}, {high}] is empty or inverted: give [low, high] "
                "with low < high"
            )
        if kind == "log_uniform" and low <= 0:
            raise SweepError(f"{where}.log_uniform: low must be above 0 (got {low})")
    for value in values:
        if not _plain(value):
            raise SweepError(f"{where}: {value!r} is not a number, string, boolean or array")
        try:
            _with(data, [f"{name}={toml_value(value)}"])
        except (msgspec.ValidationError, ConfigError) as error:
            text = _where(error, "config") if isinstance(error, msgspec.ValidationError) else error
            raise SweepError(f"{where}: the value {toml_value(value)} is refused: {text}") from None


def _plain(value: Any) -> bool:
    if isinstance(value, list):
        return all(_plain(item) and not isinstance(item, list) for item in value)
    return isinstance(value, (bool, int, float, str))


def _check_path(where: str, name: str) -> None:
    parts = name.split(".")
    hints = typing.get_type_hints(Config)
    if len(parts) < 2 or parts[0] not in hints:
        close = closest_field(parts[0], Config)
        if close and len(parts) > 1 and parts[1] in hints[close].__struct_fields__:
            close = f"{close}.{parts[1]}"
        hint = f"; did you mean `{close}`?" if close else ""
        sections = ", ".join(Config.__struct_fields__)
        raise SweepError(
            f"{where}: unknown config path `{name}`{hint} (a path is section.key; "
            f"sections: {sections})"
        )
    section = hints[parts[0]]
    if parts[1] not in section.__struct_fields__:
        close = closest_field(parts[1], section)
        hint = f"; did you mean `{parts[0]}.{close}`?" if close else ""
        raise SweepError(f"{where}: unknown config path `{name}`{hint}")
    is_table = parts[:2] == ["env", "options"]
    if len(parts) != (3 if is_table else 2):
        raise SweepError(f"{where}: `{name}` is not a config key (section.key, env.options.KEY)")
    if name in SWEEP_OWN:
        raise SweepError(f"{where}: the sweep sets `{name}` for each run itself; sweep another key")


def _target(path: Path, objective: Objective, config: Config) -> float | None:
    if objective.target is not None:
        if not math.isfinite(objective.target):
            raise SweepError(f"{path}: sweep.objective.target must be a finite number")
        return objective.target
    if objective.metric != "time_to_target":
        return config.train.target_return
    from operant.trainer.services.best import env_target

    target = env_target(config)
    if target is None:
        raise SweepError(
            f"{path}: sweep.objective.metric = time_to_target needs a target return, and "
            f"{config.env.id} has none registered: set sweep.objective.target (or "
            "train.target_return), or choose final_return or return_auc"
        )
    return target


def config_toml(
    data: dict[str, Any],
    header: str = "The config every trial of this sweep trains (operant sweep wrote it).",
) -> str:
    """The raw config `data` (its sections' tables) as a TOML file operant-train reads."""
    lines = [f"# {line}" for line in header.splitlines()]
    for section, table in data.items():
        lines.append(f"\n[{section}]")
        lines += [f"{key} = {toml_value(value)}" for key, value in table.items()]
    return "\n".join(lines) + "\n"
