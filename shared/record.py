"""The per-update record: what one PPO update reports, every name declared once.

This module owns
- `PHASES`, the training loop's named profiling phases in loop order, and how a phase's time
  is named in the metrics file (`phase_metric`, `phase_of`);
- `UpdateRecord`, the typed record of one update. Its fields, in order, are progress.jsonl's
  keys (one JSON object per line, `encode_progress_line`); each field's annotation declares
  what it is (`MetricDeclaration`: counter or gauge, unit, description, the monitor's label,
  whether the metrics file publishes it and keeps a history curve of it). A field's name is
  its name in the metrics file; only `updates` is spelled `update` in progress.jsonl, as it
  always was;
- `PPOStatistics`, what the PPO update measures (its fields are `UpdateRecord`'s);
- `RunSummary`, the line operant-train prints when it ends;
- the tables derived from these: `RECORD_METRICS`, `PHASE_METRICS`, `RUN_METRICS` (what the
  metrics file holds besides the record), from which trainer.telemetry builds the file's
  schema, the monitor takes its labels, and the exporter (through the schema) its names.

Imports msgspec only: the monitor and the exporter import it without torch.
"""

from __future__ import annotations

import json
import typing
from typing import Annotated

import msgspec

COUNTER = "counter"
GAUGE = "gauge"
TEXT = "text"
# The same words as operant.shared.metrics_layout's KIND_*: a declaration's kind is the kind
# of its slot in the metrics file.

UNIX_TIME = "unix s"
"""The unit of a gauge that holds a moment, seconds since the Unix epoch: readers show it as
a time of day, not as a duration."""

PHASES = ("env", "forward", "store", "gae", "update", "publish")
"""The loop's profiling phases in loop order: env stepping, policy forward, rollout storage,
GAE, the PPO update, and publishing the previous update (metrics file and progress log)."""


RETURN_WINDOW = 100
"""Finished episodes in `episode_return_mean` (the usual "mean of the last 100"): readers
that pool ranks' means weight each by the episodes its window holds."""
SOLVE_WINDOW = RETURN_WINDOW
"""Episodes in the "mean of the last 100" that solves an env."""


class MetricDeclaration(msgspec.Struct, frozen=True, kw_only=True):
    """What one metric is; declared once, next to the field that holds it."""

    name: str = ""
    """The metric's name in the metrics file (and the record's attribute). A record field's
    declaration leaves it empty: the field's name fills it in (`RECORD_METRICS`)."""
    kind: str
    """`counter` (an integer that only grows), `gauge` (a float) or `text`."""
    unit: str = ""
    """The unit shown next to the value (`steps`, `s`, `steps/s`, `bytes`); empty if none."""
    description: str = ""
    """One sentence: the metrics file's description and the exporter's HELP text."""
    label: str = ""
    """A short title for the monitor (its big numbers and curves)."""
    in_file: bool = True
    """Published into the metrics file (a record field that is False is progress.jsonl's
    alone)."""
    in_history: bool = False
    """Also appended to the metrics file's history ring, once per update: a curve."""


def counter(
    unit: str, description: str, *, label: str = "", in_history: bool = False
) -> MetricDeclaration:
    return MetricDeclaration(
        kind=COUNTER, unit=unit, description=description, label=label, in_history=in_history
    )


def gauge(
    unit: str, description: str, *, label: str = "", in_file: bool = True, in_history: bool = False
) -> MetricDeclaration:
    return MetricDeclaration(
        kind=GAUGE,
        unit=unit,
        description=description,
        label=label,
        in_file=in_file,
        in_history=in_history,
    )


class PPOStatistics(msgspec.Struct, frozen=True):
    """What one PPO update measured (operant.trainer.loop.ppo.ppo_update): the last epoch's mean
    losses and statistics, the batch's explained variance (NaN when the returns are constant)
    and the epochs run. UpdateRecord's fields of the same names say what each means."""

    policy_loss: float
    value_loss: float
    entropy: float
    approx_kl: float
    clip_fraction: float
    explained_variance: float
    epochs: float


class UpdateRecord(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One PPO update, as progress.jsonl records it and the metrics file publishes it.

    None stands for a value the update could not measure (no episode finished yet, a
    non-finite statistic); progress.jsonl writes it as null, the metrics file as NaN. A field
    added later gets a default and appears in progress.jsonl only when set: `solved` only
    when true, the env-level episode fields only when rows are agents (agents_per_env > 1).
    """

    updates: Annotated[int, counter("updates", "PPO updates done.", label="update")] = (
        msgspec.field(name="update")
    )
    global_step: Annotated[
        int,
        counter(
            "steps", "Environment steps taken, summed over envs.", label="steps", in_history=True
        ),
    ]
    episodes: Annotated[int, counter("episodes", "Episodes finished.", label="episodes")]
    elapsed_s: Annotated[
        float, gauge("s", "Seconds since training started.", label="elapsed", in_history=True)
    ]
    sps: Annotated[
        float,
        gauge(
            "steps/s",
            "Environment steps per second over the last update.",
            label="steps/s",
            in_history=True,
        ),
    ]
    sps_mean: Annotated[
        float,
        gauge(
            "steps/s", "Environment steps per second since training started.", label="mean steps/s"
        ),
    ]
    episode_return_mean: Annotated[
        float | None,
        gauge(
            "",
            "Mean return of the last 100 finished episodes.",
            label="episode return",
            in_history=True,
        ),
    ]
    episode_return_min: Annotated[
        float | None,
        gauge(
            "", "Lowest return among episodes finished in the last update.", label="lowest return"
        ),
    ]
    episode_return_max: Annotated[
        float | None,
        gauge(
            "", "Highest return among episodes finished in the last update.", label="highest return"
        ),
    ]
    episode_length_mean: Annotated[
        float | None,
        gauge(
            "steps",
            "Mean length of episodes finished in the last update.",
            label="episode length",
            in_history=True,
        ),
    ]
    episodes_this_update: Annotated[
        int,
        gauge(
            "episodes",
            "Episodes finished during the last update.",
            label="episodes/update",
            in_file=False,
        ),
    ]
    learning_rate: Annotated[
        float,
        gauge("", "Adam step size of the last update.", label="learning rate", in_history=True),
    ]
    policy_loss: Annotated[
        float | None,
        gauge(
            "", "Clipped surrogate loss (last epoch's mean).", label="policy loss", in_history=True
        ),
    ]
    value_loss: Annotated[
        float | None,
        gauge("", "Value loss (last epoch's mean).", label="value loss", in_history=True),
    ]
    entropy: Annotated[
        float | None,
        gauge("nats", "Policy entropy (last epoch's mean).", label="entropy", in_history=True),
    ]
    approx_kl: Annotated[
        float | None,
        gauge("", "Approximate KL between old and new policy.", label="approx KL", in_history=True),
    ]
    clip_fraction: Annotated[
        float | None,
        gauge(
            "",
            "Fraction of samples whose ratio was clipped.",
            label="clip fraction",
            in_history=True,
        ),
    ]
    explained_variance: Annotated[
        float | None,
        gauge(
            "",
            "How much of the returns' variance the value function explains.",
            label="explained variance",
            in_history=True,
        ),
    ]
    epochs: Annotated[
        float | None,
        gauge(
            "epochs",
            "PPO epochs run (fewer than configured when ppo.target_kl stopped them).",
            label="epochs",
            in_file=False,
        ),
    ]
    phase_s: Annotated[
        dict[str, float],
        gauge(
            "s",
            "Seconds in each phase (PHASES) during the last update; the metrics file holds "
            "them as PHASE_METRICS.",
            label="phases",
            in_file=False,
        ),
    ]
    solved: Annotated[
        bool,
        gauge(
            "",
            "True on the update whose last-100 mean return first reached train.target_return.",
            label="solved",
            in_file=False,
        ),
    ] = False
    env_episodes: Annotated[
        int | None,
        gauge(
            "episodes",
            "Env-episodes (whole worlds) finished during the last update; absent with one "
            "agent per env.",
            label="env episodes/update",
        ),
    ] = None
    env_episode_return_mean: Annotated[
        float | None,
        gauge(
            "",
            "Mean return of the env-episodes finished during the last update (an env's return "
            "sums its agents'); absent with one agent per env.",
            label="env episode return",
            in_history=True,
        ),
    ] = None
    env_phase_s: Annotated[
        dict[str, float] | None,
        gauge(
            "s",
            "Seconds in each of the env's own step phases during the last update (sub-phases "
            "of env; Grid-v0 with OPERANT_PROFILING=1); absent otherwise.",
            label="env phases",
            in_file=False,
        ),
    ] = None


def _record_metrics() -> tuple[MetricDeclaration, ...]:
    hints = typing.get_type_hints(UpdateRecord, include_extras=True)
    declared = []
    for name in UpdateRecord.__struct_fields__:
        (declaration,) = (
            item for item in hints[name].__metadata__ if isinstance(item, MetricDeclaration)
        )
        declared.append(msgspec.structs.replace(declaration, name=name))
    return tuple(declared)


RECORD_METRICS = _record_metrics()
"""Every field of UpdateRecord, in progress.jsonl's order, with its name filled in."""


def phase_metric(phase: str) -> str:
    """The metrics file's name for a phase's seconds: `phase_env_s`."""
    return f"phase_{phase}_s"


def phase_of(name: str) -> str | None:
    """The phase a metrics-file name holds the seconds of (`phase_env_s` -> `env`), or None
    for any other name. Readers use it for phases this version does not know too."""
    prefix, suffix = "phase_", "_s"
    if name.startswith(prefix) and name.endswith(suffix) and len(name) > len(prefix + suffix):
        return name[len(prefix) : -len(suffix)]
    return None


def env_phase_metric(phase: str) -> str:
    """The metrics file's name for the seconds of one of the env's own step phases (a
    sub-phase of env, published by a profiling env: Grid-v0 with OPERANT_PROFILING=1):
    `env_phase_observations_s`."""
    return f"env_phase_{phase}_s"


def env_phase_of(name: str) -> str | None:
    """The env step phase a metrics-file name holds the seconds of, or None."""
    prefix, suffix = "env_phase_", "_s"
    if name.startswith(prefix) and name.endswith(suffix) and len(name) > len(prefix + suffix):
        return name[len(prefix) : -len(suffix)]
    return None


def env_phase_metrics(phases: tuple[str, ...]) -> tuple[MetricDeclaration, ...]:
    """Gauges for an env's own step phases (its `step_timing` keys, in its order): the
    metrics-file side of UpdateRecord.env_phase_s, declared when the run starts."""
    return tuple(
        MetricDeclaration(
            name=env_phase_metric(phase),
            kind=GAUGE,
            unit="s",
            description=f"Seconds in the env's {phase} step phase during the last update (a "
            "sub-phase of env).",
            label=f"env {phase}",
        )
        for phase in phases
    )


PHASE_METRICS = tuple(
    MetricDeclaration(
        name=phase_metric(phase),
        kind=GAUGE,
        unit="s",
        description=f"Seconds in the {phase} phase during the last update.",
        label=phase,
        in_history=True,
    )
    for phase in PHASES
)
"""Each phase's seconds during the last update: the metrics file's seqlocked snapshot block
(one coherent breakdown) and, after the record's curves, its history."""

TOTAL_STEPS = MetricDeclaration(
    name="total_steps",
    kind=GAUGE,
    unit="steps",
    description="The run's step budget.",
    label="step budget",
)
CPU_PERCENT = MetricDeclaration(
    name="cpu_percent",
    kind=GAUGE,
    unit="%",
    description="The trainer process's CPU use (100 = one core).",
    label="CPU",
)
RSS_BYTES = MetricDeclaration(
    name="rss_bytes",
    kind=GAUGE,
    unit="bytes",
    description="The trainer process's resident memory.",
    label="RSS",
)
ENV_ID = MetricDeclaration(name="env_id", kind=TEXT, description="Environment id.", label="env")
ENV_IMPL = MetricDeclaration(
    name="env_impl",
    kind=TEXT,
    description="Environment implementation (native, torch, reference).",
    label="env impl",
)
DEVICE = MetricDeclaration(
    name="device", kind=TEXT, description="Torch device of the policy.", label="device"
)
ELAPSED_BEFORE_S = MetricDeclaration(
    name="elapsed_before_s",
    kind=GAUGE,
    unit="s",
    description="Seconds the run trained before this trainer process (its earlier starts, "
    "when resumed); a monitor's uptime adds it, so it agrees with elapsed_s.",
    label="trained before",
)
LAST_UPDATE_UNIX_S = MetricDeclaration(
    name="last_update_unix_s",
    kind=GAUGE,
    unit=UNIX_TIME,
    description="When this trainer process last finished an update (its record published), "
    "seconds since the Unix epoch; NaN until its first. Readers tell a run that lives but no "
    "longer trains from it (operant.shared.progress).",
    label="last update",
)
WARNING = MetricDeclaration(
    name="warning",
    kind=TEXT,
    description="What the trainer could not do but trains on without "
    "(a checkpoint the disk refused); empty when all is well.",
    label="warning",
)


def _process_counter(of: str, unit: str, what: str) -> MetricDeclaration:
    return MetricDeclaration(
        name=f"process_{unit}",
        kind=COUNTER,
        unit=unit,
        description=f"{what} this trainer process did: 0 when it started, so a resumed run's "
        f"count starts again where {of} continues from its checkpoint (a Prometheus counter "
        "whose increase() counts what was trained, redone updates included).",
        label=f"{unit} (this process)",
    )


PROCESS_COUNTERS = {
    "global_step": _process_counter("global_step", "steps", "Environment steps"),
    "episodes": _process_counter("episodes", "episodes", "Episodes"),
    "updates": _process_counter("updates", "updates", "PPO updates"),
}
"""For each of the record's counters (a run's position, which a resume takes back to its
checkpoint), the counter of the same thing done by this trainer process alone."""

TRAINED_STEPS = MetricDeclaration(
    name="trained_steps",
    kind=COUNTER,
    unit="steps",
    description="Environment steps all of the run's trainer processes did, redone updates "
    "included: a resumed process starts from its predecessor's last published count (read "
    "from the metrics file it replaces), so the count never steps back and Prometheus's "
    "increase() is right however fast the restarts come; 0 only for a new run.",
    label="steps trained (all processes)",
)
"""The run's own counter of steps trained: unlike `process_steps`, no reset at a restart that
a scrape might miss (a successor that passed its predecessor's count before its first scrape
hid the reset, and increase() lost the predecessor's steps)."""

RUN_METRICS = (
    TOTAL_STEPS,
    CPU_PERCENT,
    RSS_BYTES,
    ELAPSED_BEFORE_S,
    LAST_UPDATE_UNIX_S,
    ENV_ID,
    ENV_IMPL,
    DEVICE,
    WARNING,
)
"""What the metrics file holds about the run besides its records: the budget, the trainer
process's resources, and texts. (A field added later goes last in its kind: readers find
metrics by name.)"""

_LABELS = {
    declared.name: declared.label
    for declared in (*RECORD_METRICS, *PHASE_METRICS, *RUN_METRICS, TRAINED_STEPS)
}


def label(name: str) -> str:
    """The monitor's title for metric `name`; a name this version does not declare reads
    with spaces for underscores."""
    return _LABELS.get(name) or name.replace("_", " ")


# --- progress.jsonl -------------------------------------------------------------------------

_decoder = msgspec.json.Decoder(UpdateRecord)


def encode_progress_line(record: UpdateRecord) -> str:
    """One progress.jsonl line (without its newline): the fields in order, None as null,
    floats as Python's repr (what json.dumps has always written, so readers' parsers and
    recorded runs compare bit for bit), `solved` only when true."""
    return json.dumps(msgspec.to_builtins(record), separators=(",", ":"))


def decode_progress_line(line: bytes | str) -> UpdateRecord:
    """The record a progress.jsonl line holds; msgspec.DecodeError (a ValidationError for a
    line that is JSON but not a record) otherwise."""
    return _decoder.decode(line)


class RunSummary(msgspec.Struct, kw_only=True):
    """What operant-train prints when it ends (`{"summary": {...}}` with --log-format json)."""

    run_id: str
    global_step: int
    """The run's steps, a resumed run's earlier processes' included."""
    episode_return_mean: float | None
    elapsed_s: float
    """Wall-clock seconds this process trained (its steps: steps_this_process)."""
    sps_mean: float | None
    solved_at_s: float | None
    run_dir: str
    stopped_by: str | None
    """The signal that stopped the run early (SIGTERM, SIGINT), None when it ran out."""
    checkpoint: str | None
    target_return: float | None = None
    """What "solved" means for this run: train.target_return, else the env's registered
    reward threshold; None when there is neither."""
    solved: bool | None = None
    """Whether the mean return of the last 100 episodes reached target_return (None without a
    target)."""
    solved_at_step: int | None = None
    """The step of the first update at or above the target (with solved_at_s, the run's
    seconds then)."""
    best_return_mean: float | None = None
    """The best mean return of the last 100 episodes the run saw (once 100 had finished)."""
    best_at_step: int | None = None
    best_model: str | None = None
    """best.pt, the policy of that best mean, when it was written."""
    steps_this_process: int | None = None
    """The steps this process trained, in elapsed_s (fewer than global_step after a resume)."""
