"""The trainer's configuration: typed msgspec Structs, loaded from TOML plus `--set` overrides.

Input is decoded with `msgspec.convert` at the boundary, so an unknown key, a wrong type or an
out-of-range value is refused, with the field's dotted name, before anything starts.
Cross-field rules and derived values live in `derive()`, which also names the field it blames.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tomllib
import typing
from collections.abc import Sequence
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Struct

from operant.trainer.run.errors import counted

Positive = Annotated[int, Meta(gt=0)]
PositiveFloat = Annotated[float, Meta(gt=0)]
"""Positive, infinity included: where it means "no limit" (a clip, a checkpoint interval)."""
FinitePositive = Annotated[float, Meta(gt=0, lt=sys.float_info.max)]
"""Positive and finite: a learning rate of inf trained NaNs after the run had started."""
Fraction = Annotated[float, Meta(ge=0, le=1)]
NonNegative = Annotated[float, Meta(ge=0, lt=sys.float_info.max)]

MAX_SEED = 2**62
"""The largest train.seed (and `operant eval --seed`): seeds derived from it by adding a rank's
or an env's index stay below 2^63."""


class ConfigError(ValueError):
    """Bad configuration input; the message names the file/field and what is expected."""


class EnvConfig(Struct, forbid_unknown_fields=True, kw_only=True):
    """Which environment, how it is implemented, and how many copies step together."""

    id: Annotated[str, Meta(min_length=1)] = "CartPole-v1"
    """Environment id: one of Operant's (CartPole-v1, ...) or, with impl = "reference", any
    installed Gymnasium id."""
    impl: Literal["auto", "native", "torch", "reference"] = "auto"
    """native: Cython kernels; torch: batched tensor ops on train.device; reference:
    Gymnasium's own env; auto: native where built, else reference."""
    num_envs: Positive = 128
    """Environments stepped together (the batch width of every rollout step). The CartPole
    defaults (128 x 16 steps, 2 epochs of 4 minibatches) came from `operant bench trainer
    --matrix` on a 2-core machine: docs/journal/2026-11-22-training-end-to-end.md."""
    overlap: bool = False
    """Overlapped rollout (native impl, even num_envs): step half the envs on a second native
    thread while the policy works on the other half. Off by default: on a 2-core machine it
    wins only where stepping costs about as much as the policy
    (docs/journal/2026-11-23-tuning-the-cpu-path.md)."""
    workers: Positive = 1
    """Processes that step a Python (reference) env: each of `workers` processes steps
    env.num_envs / workers of the envs, writing into shared memory the trainer reads without
    a copy (operant.envs.reference.workers); 1 steps them in the trainer's process. For env.impl =
    "reference" (Gymnasium's envs), where a step costs tens of microseconds of Python; the
    native and torch envs refuse it. At most env.num_envs (docs/envs.md)."""
    step_timeout_s: FinitePositive | None = None
    """For Python envs (env.impl = "reference"): the seconds a step may take (a worker's
    answer to a step or reset, with env.workers >= 2) before the run ends as failed, naming
    it (an env that hangs); None waits as long as it takes. In the trainer's own process
    (env.workers = 1) a signal interrupts the step where its Python code is; a step stuck in
    C code that holds the GIL cannot be cut short (operant.envs.reference.step_deadline)."""
    stop_grace_s: FinitePositive = 30.0
    """After a stop signal (SIGTERM, a first Ctrl-C), the seconds a Python env's step may
    still take (counted from the later of the signal and the step's start) before the run
    ends as failed, naming it: a stop waits for an update boundary, which a hung env never
    lets come (docs/envs.md). A worker's wait ends then; a step in the trainer's own process
    is interrupted where its Python code is (operant.envs.reference.step_deadline)."""
    max_episode_steps: Positive | None = None
    """Truncation horizon; None keeps the env's registered limit (500 for CartPole-v1)."""
    frame_stack: Positive = 1
    """Observations the policy sees at once: the env's last k, stacked along the first axis
    (uint8 (C, H, W) frames become (k * C, H, W); float32 (D,) vectors (k * D,)); any host env
    (docs/envs.md, "Frame stacking"). 1 stacks nothing: the kernel writes straight into the
    buffer the policy reads."""
    info_mode: Literal["full", "stats", "none"] = "stats"
    """What Gymnasium's step() returns in info (operant.envs.face.info_mode): "stats" only what
    autoreset needs, episode statistics reduced in the kernel; "full" adds Gymnasium's
    per-env episode dicts; "none" nothing (the fastest step). The trainer steps with
    step_bound(), which builds no info, and reads the kernel's statistics in every mode."""
    options: dict[str, bool | int | float | str] = msgspec.field(default_factory=dict)
    """The env's own options (keywords of its constructor), for envs that take them: the grid
    world's agents, width, height, window, ... (docs/envs.md). In a config file, a table
    `[env.options]`; on the command line `--set env.options.agents=20`. An env refuses an
    option it does not take, in one line."""


class PolicyConfig(Struct, forbid_unknown_fields=True, kw_only=True):
    """The policy network. The built-in one ("mlp") is an actor-critic: separate actor and
    critic MLPs of the same shape, or one shared trunk with an actor head and a value head."""

    kind: str = "auto"
    """Which registered policy trains (operant.trainer.policies.registry): "auto" chooses from the
    env's observation spec (flat float32 observations: the MLP these fields describe; image
    observations (C, H, W): "cnn"; uint8 (T, 3) tokens: "token"); a name picks one, e.g.
    "mlp" or "cnn"; "module:Name" builds a network of yours, a CleanRL Agent as it is
    (operant.trainer.policies.user; docs/envs.md, "Your own network")."""
    hidden_sizes: list[Positive] = msgspec.field(default_factory=lambda: [64, 64])
    """Width of each hidden layer."""
    shared: bool = False
    """One trunk for actor and critic (two heads on its last layer), as PufferLib's default
    policy; false: separate actor and critic MLPs, as CleanRL's. Shared costs about half the
    arithmetic per sample for the same widths."""
    activation: Literal["tanh", "relu"] = "tanh"
    """Hidden-layer nonlinearity."""
    log_std_init: Annotated[float, Meta(ge=-20, le=20)] = 0.0
    """Continuous actions: initial log standard deviation of the Gaussian (state-independent,
    learned). Larger explores more."""
    conv_channels: list[Positive] = msgspec.field(default_factory=lambda: [16])
    """For "cnn": output channels of each unpadded convolution (ReLU after each; 3x3, stride
    1 unless conv_kernels and conv_strides say otherwise). [16] is MinAtar's network; [32, 64]
    a deeper option (each 3x3 layer trims one cell off each edge of the frame, so a 10x10
    frame takes at most 4)."""
    conv_kernels: list[Positive] = msgspec.field(default_factory=list)
    """For "cnn": each convolution's kernel size, one per conv_channels; [] is 3 for each.
    Large frames want strides: [8, 4, 3] with conv_strides [4, 2, 1], conv_channels
    [32, 64, 64] and conv_dense 512 is the Nature DQN network (SB3's and CleanRL's Atari CNN)."""
    conv_strides: list[Positive] = msgspec.field(default_factory=list)
    """For "cnn": each convolution's stride, one per conv_channels; [] is 1 for each."""
    conv_dense: Positive = 128
    """For "cnn": width of the ReLU layer between the flattened feature maps and the actor
    and critic heads (MinAtar's 128)."""


class NormalizeConfig(Struct, forbid_unknown_fields=True, kw_only=True):
    """Running normalisation of what the policy sees; its statistics are saved with the model."""

    obs: bool = False
    """Normalise observations by their running mean and standard deviation."""
    reward: bool = False
    """Divide rewards by the running standard deviation of the discounted return."""
    clip_obs: PositiveFloat = 10.0
    """Clip normalised observations to +-this."""
    clip_reward: PositiveFloat = 10.0
    """Clip normalised rewards to +-this."""


class PPOConfig(Struct, forbid_unknown_fields=True, kw_only=True):
    """Clipped PPO with GAE (Schulman et al. 2017), as in CleanRL's ppo.py."""

    num_steps: Positive = 16
    """Steps each env takes per rollout; the batch is num_steps x env.num_envs."""
    learning_rate: FinitePositive = 3e-3
    """Adam step size (at the start, when annealed)."""
    anneal_lr: bool = True
    """Decay the learning rate linearly to 0 over train.total_steps."""
    gamma: Fraction = 0.99
    """Discount factor."""
    gae_lambda: Fraction = 0.95
    """GAE lambda."""
    num_minibatches: Positive = 4
    """Minibatches per epoch; must divide the batch."""
    update_epochs: Positive = 2
    """Passes over each batch (the update's cost is proportional to it)."""
    norm_adv: bool = True
    """Normalise advantages per minibatch."""
    clip_coef: FinitePositive = 0.2
    """Policy ratio clip range."""
    clip_vloss: bool = True
    """Clip the value loss around the old values, as in the PPO paper's implementation."""
    ent_coef: NonNegative = 0.0
    """Entropy bonus weight."""
    vf_coef: NonNegative = 0.5
    """Value loss weight."""
    max_grad_norm: PositiveFloat = 0.5
    """Global gradient-norm clip."""
    target_kl: PositiveFloat | None = None
    """Stop an update's epochs early once the approximate KL exceeds this; None never does."""
    adam_eps: FinitePositive = 1e-5
    """Adam epsilon."""
    update_impl: Literal["auto", "native", "torch"] = "auto"
    """Who computes the update's minibatch steps and the rollout's policy forward: "torch"
    (autograd, the reference), "native" (operant.cext.fused_mlp: one C call per epoch and per
    step, for the MLP actor-critic with discrete actions on the CPU; any other run is a
    config error), or "auto" (native where it can run, else torch).
    docs/journal/issue-18-native-update.md has what each costs and how the two are held
    together."""
    update_threads: Annotated[int, Meta(ge=1, le=16)] = 1
    """Threads the native update shares each minibatch's gradient among (its blocks of 32 rows;
    the caller's thread and workers it starts): more than one pays where cores sit idle during
    the update (docs/journal/2026-11-29-pixels-best-peer-pace.md). A run is deterministic for a
    given count, and a resume may change it (float32 rounding only). The torch update ignores
    it (train.torch_threads is torch's)."""


class TrainConfig(Struct, forbid_unknown_fields=True, kw_only=True):
    """The run: budget, seed, devices, output."""

    total_steps: Positive = 499_712
    """Environment steps (summed over envs) to train for, rounded up to whole updates
    (env.num_envs x ppo.num_steps steps each); operant-train says so when it rounds. The
    default is 244 updates of the default 2,048-step batch."""
    seed: Annotated[int, Meta(ge=0, le=MAX_SEED)] = 1
    """Seeds the envs, torch and sampling: the same seed gives the same run on CPU. At most
    2^62: each rank and env seeds from it plus its index, within torch's and the kernels' 64
    bits."""
    target_return: float | None = None
    """Stop early once the mean return of the last 100 episodes reaches this; None trains
    for the whole budget."""
    device: str = "cpu"
    """Torch device for the policy (and for env.impl = "torch"): cpu, cuda, cuda:1, ..."""
    torch_threads: Annotated[int, Meta(ge=0, le=1024)] = 1
    """Intra-op threads for torch on CPU; 0 keeps torch's default. One is the steady choice
    on a 2-core machine: a second speeds the update up ~1.2x but competes with the trainer's
    own threads, and end-to-end steps/s then varied by 18%
    (docs/journal/2026-11-23-tuning-the-cpu-path.md)."""
    runs_dir: str | None = None
    """Runs root; None means $OPERANT_RUNS_DIR, else $XDG_STATE_HOME/operant/runs."""
    run_id: str | None = None
    """Run directory name; None makes one from the env id and the time."""
    log_every: Positive = 1
    """Print a progress line every this many updates (progress.jsonl gets every update)."""
    publish_metrics: bool = True
    """Publish live state into the run's metrics.bin for monitors, `operant runs` and the
    exporter. Off only to measure what publication costs."""
    tensorboard: bool = False
    """Also write every update's scalars (progress.jsonl's, phases as phase/<name>) as
    TensorBoard event files in the run's tensorboard/ folder, so `tensorboard --logdir
    RUNS_ROOT` shows every run; needs `pip install 'operant-rl[tensorboard]'`
    (docs/tensorboard.md). The monitor stays the live view."""
    dist_backend: Literal["auto", "gloo", "nccl"] = "auto"
    """Under torchrun (docs/distributed.md): the torch.distributed backend; auto is gloo for
    a CPU policy and nccl for a CUDA one."""
    dist_shared_memory: bool = True
    """Under torchrun, when every rank is on this machine and the policy on the CPU: sum
    the gradient between ranks through one segment in /dev/shm instead of gloo's loopback
    TCP, about 5x less wait per minibatch (docs/distributed.md, "When ranks pay"). Two ranks
    get gloo's bits; more sum in rank order, which may differ from gloo's in the last bit."""
    dist_timeout_s: FinitePositive = 300.0
    """Under torchrun: seconds a collective may wait for the other ranks before the run ends
    with a message naming the wait (a rank that stopped, hung or died), instead of hanging."""


class CheckpointConfig(Struct, forbid_unknown_fields=True, kw_only=True):
    """When the trainer writes checkpoints into the run's checkpoints/ folder. It always
    writes one when it stops on SIGTERM/SIGINT and when it finishes, and one at the next update
    boundary after SIGUSR1; a resumed run may change these settings."""

    every_updates: Positive | None = None
    """Also write one after every this many updates; None: not by update count."""
    every_seconds: PositiveFloat | None = 600.0
    """Also write one when this many seconds have passed since the last; None: not by time.
    A crash (SIGKILL, power loss) loses at most this much training."""
    keep: Positive = 3
    """Keep the newest this many checkpoints; older ones are deleted."""


class Config(Struct, forbid_unknown_fields=True, kw_only=True):
    env: EnvConfig = msgspec.field(default_factory=EnvConfig)
    policy: PolicyConfig = msgspec.field(default_factory=PolicyConfig)
    normalize: NormalizeConfig = msgspec.field(default_factory=NormalizeConfig)
    ppo: PPOConfig = msgspec.field(default_factory=PPOConfig)
    train: TrainConfig = msgspec.field(default_factory=TrainConfig)
    checkpoint: CheckpointConfig = msgspec.field(default_factory=CheckpointConfig)


class Derived(Struct, frozen=True):
    """Values computed from a Config, checked once."""

    batch_size: int
    """Steps per update, over all ranks."""
    minibatch_size: int
    """Samples per minibatch, over all ranks."""
    num_updates: int
    total_steps: int
    """The step budget trained: train.total_steps rounded up to whole updates."""
    world_size: int = 1
    """Ranks training the run (torchrun's WORLD_SIZE); each steps env.num_envs / world_size
    envs and holds batch_size / world_size of every batch (docs/distributed.md)."""
    rows_per_env: int = 1
    """Batch rows one env contributes per update: ppo.num_steps x its agents."""

    @property
    def local_batch_size(self) -> int:
        """Steps per update of one rank."""
        return self.batch_size // self.world_size

    @property
    def local_minibatch_size(self) -> int:
        """Samples per minibatch of one rank."""
        return self.minibatch_size // self.world_size

    def rounding_note(self, config: Config) -> str | None:
        """One line saying how train.total_steps was rounded; None when it was not."""
        if self.total_steps == config.train.total_steps:
            return None
        agents = self.rows_per_env // config.ppo.num_steps
        rows = "env.num_envs x ppo.num_steps" + (
            f" x {agents} agents per env" if agents != 1 else ""
        )
        return (
            f"train.total_steps = {config.train.total_steps:,} is not a whole number of "
            f"updates of {self.batch_size:,} steps ({rows}): training "
            f"{self.total_steps:,} steps ({counted(self.num_updates, 'update')})"
        )


def launched_world_size() -> int:
    """torchrun's WORLD_SIZE for this process (1 without torchrun; operant.trainer.distributed.group
    checks the variables properly before anything trains)."""
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1


def derive(config: Config, agents_per_env: int = 1, world_size: int | None = None) -> Derived:
    """Cross-field checks and derived values; raises ConfigError naming the field.

    The batch counts rows (operant.envs.contract): an env with `agents_per_env` agents
    contributes that many rows per step, and train.total_steps counts row steps. Under
    torchrun (`world_size`, by default the launch's) the batch is the run's, over all ranks:
    env.num_envs and every minibatch are split evenly between them."""
    world = launched_world_size() if world_size is None else world_size
    batch = config.env.num_envs * agents_per_env * config.ppo.num_steps
    _check_batch(config, batch, agents_per_env, world)
    _check_env_split(config, world)
    if not config.policy.hidden_sizes:
        raise ConfigError("policy.hidden_sizes must name at least one layer width")
    if config.train.target_return is not None and not math.isfinite(config.train.target_return):
        raise ConfigError("train.target_return must be a finite number or left out")
    # Rounded up, as a budget is "at least this many steps" (SB3's learn() does the same);
    # a run never stops part-way through an update.
    num_updates = -(-config.train.total_steps // batch)
    return Derived(
        batch_size=batch,
        minibatch_size=batch // config.ppo.num_minibatches,
        num_updates=num_updates,
        total_steps=num_updates * batch,
        world_size=world,
        rows_per_env=agents_per_env * config.ppo.num_steps,
    )


def _check_batch(config: Config, batch: int, agents_per_env: int, world: int) -> None:
    """The batch splits into whole minibatches, for the run and for each rank's share."""
    if config.env.num_envs % world:
        raise ConfigError(
            f"env.num_envs = {config.env.num_envs} is the run's total over {world} ranks, "
            f"each stepping the same share: make it a multiple of {world}"
        )
    rows = "env.num_envs x ppo.num_steps" + (
        f" x {agents_per_env} agents per env" if agents_per_env != 1 else ""
    )
    if batch % config.ppo.num_minibatches:
        raise ConfigError(
            f"ppo.num_minibatches = {config.ppo.num_minibatches} must divide the batch "
            f"({rows} = {batch})"
        )
    if (batch // world) % config.ppo.num_minibatches:
        raise ConfigError(
            f"ppo.num_minibatches = {config.ppo.num_minibatches} must divide each of the "
            f"{world} ranks' share of the batch ({batch // world})"
        )


def _check_env_split(config: Config, world: int) -> None:
    """A rank's envs split as env.overlap (two halves) and env.workers (one env at least
    each) ask."""
    if config.env.overlap and config.env.impl in ("torch", "reference"):
        raise ConfigError(
            f'env.overlap = true needs env.impl = "native" (its second thread '
            f'steps the compiled kernels), got "{config.env.impl}": set env.impl '
            f"or drop overlap"
        )
    if config.env.overlap and (config.env.num_envs // world) % 2:
        raise ConfigError(
            f"env.overlap = true splits the envs into two halves: env.num_envs must be even, "
            f"got {config.env.num_envs}"
            if world == 1
            else f"env.overlap = true splits each rank's envs into two halves: env.num_envs "
            f"must give an even share, got {config.env.num_envs} / {world} ranks = "
            f"{config.env.num_envs // world} each"
        )
    if config.env.workers > config.env.num_envs // world:
        each = f" / {world} ranks" if world > 1 else ""
        raise ConfigError(
            f"env.workers = {config.env.workers} is more than env.num_envs = "
            f"{config.env.num_envs}{each}: each worker steps at least one env"
        )


def _describe(error: msgspec.ValidationError, source: str) -> str:
    """msgspec's '... - at `$.ppo.gamma`' as 'source: ppo.gamma: ...'."""
    text = str(error)
    message, _, where = text.rpartition(" - at `")
    if not message:
        sections = ", ".join(Config.__struct_fields__)
        text = text.replace("Object contains unknown field", "unknown section")
        return f"{source}: {text}{_did_you_mean(text, Config)} (sections: {sections})"
    path = where.rstrip("`").removeprefix("$").lstrip(".")
    if message.startswith("Object contains unknown field"):
        section = typing.get_type_hints(Config).get(path.split(".")[0])
        message = message.replace("Object contains unknown field", "unknown key")
        message += _did_you_mean(message, section) if "." not in path else ""
    # FinitePositive's bound, said as what it means
    message = message.replace(f"`float` < {sys.float_info.max!r}", "a finite `float`")
    if message.startswith("Invalid enum value"):
        choices = _choices(path.split("."))
        message += f" (choices: {', '.join(choices)})" if choices else ""
    return f"{source}: {path or 'top level'}: {message}"


def _did_you_mean(message: str, struct: Any) -> str:
    """'; did you mean `ppo.learning_rate`?' for the unknown name in `message` (between
    backticks) where one of `struct`'s fields is close to it; '' otherwise."""
    name = message.rpartition("`")[0].rpartition("`")[2]
    close = closest_field(name, struct)
    return f"; did you mean `{close}`?" if close else ""


def closest_field(name: str, struct: Any) -> str | None:
    """The field of msgspec Struct `struct` whose name is close to `name` (a misspelling), or
    None (also where `struct` is not a Struct)."""
    import difflib

    fields = getattr(struct, "__struct_fields__", ())
    close = difflib.get_close_matches(name, fields, n=1, cutoff=0.75)
    return close[0] if close else None


def _choices(parts: list[str]) -> list[str]:
    """The values a section.key of Literal type takes."""
    hint = _key_hint(parts)
    if typing.get_origin(hint) is not Literal:
        return []
    return [str(value) for value in typing.get_args(hint)]


def _key_hint(parts: list[str]) -> Any:
    """The type of section.key (None for anything else)."""
    if len(parts) != 2:
        return None
    section = typing.get_type_hints(Config).get(parts[0])
    return typing.get_type_hints(section).get(parts[1]) if section is not None else None


def _parse_value(text: str) -> Any:
    """A --set value as TOML (numbers, booleans, arrays, quoted strings); bare words are strings."""
    try:
        return tomllib.loads(f"value = {text}")["value"]
    except tomllib.TOMLDecodeError:
        return text


def toml_value(value: Any) -> str:
    """`value` as a user writes it in a config file or `--set`: true/false, "quoted" strings,
    arrays, inline tables, and none (what --set takes for no value) for None."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a TOML basic string
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        pairs = ", ".join(f"{key} = {toml_value(item)}" for key, item in value.items())
        return "{ " + pairs + " }" if pairs else "{}"
    return repr(value)


def apply_override(data: dict[str, Any], assignment: str) -> None:
    """Apply one `--set section.key=value` to the raw config mapping."""
    key, sep, value = assignment.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(
            f"--set {assignment!r}: expected section.key=value, e.g. ppo.learning_rate=1e-3"
        )
    parts = key.split(".")
    if len(parts) not in (2, 3) or not all(parts):
        raise ConfigError(
            f"--set {assignment!r}: the key must be section.key, or section.table.key for a "
            f"table such as env.options (sections: {', '.join(Config.__struct_fields__)})"
        )
    table = data
    for depth, name in enumerate(parts[:-1]):
        table = table.setdefault(name, {})
        if not isinstance(table, dict):
            kind = "a section" if depth == 0 else "a table"
            raise ConfigError(f"--set {assignment!r}: {'.'.join(parts[: depth + 1])} is not {kind}")
    text = value.strip()
    clears = text.lower() in NONE_WORDS and _clearable(parts)
    table[parts[-1]] = None if clears else _parse_value(text)


NONE_WORDS = ("none", "null")
"""`--set section.key=none` (or null, in any case) gives an optional key no value (TOML has
no null: in a file, leave the key out), where the key takes no string (a string key keeps the
word)."""


def _clearable(parts: list[str]) -> bool:
    """Whether section.key may be None and takes no string."""
    args = typing.get_args(_key_hint(parts))
    return type(None) in args and str not in args


TRAINERS_OWN = frozenset({"autoreset_mode", "render_mode", "render_scale"})
"""make_env keywords an env's options must not carry: the trainer decides them."""


def env_kwargs(config: Config) -> dict[str, Any]:
    """The make_env keywords the config gives its env (`build_env` passes them): its options,
    frame stack, info mode, truncation horizon and step deadline."""
    taken = sorted(set(config.env.options) & TRAINERS_OWN)
    if taken:  # (autoreset_mode was taken and did nothing: the trainer steps SAME_STEP)
        raise ConfigError(
            f"env.options.{taken[0]} is make_env's keyword, which the trainer sets itself (it "
            "steps SAME_STEP and draws no frames; env.max_episode_steps cuts episodes): remove it"
        )
    kwargs: dict[str, Any] = {"options": dict(config.env.options)}
    if config.env.frame_stack != 1:
        kwargs["frame_stack"] = config.env.frame_stack
    if config.env.info_mode != "stats":
        kwargs["info_mode"] = config.env.info_mode
    if config.env.max_episode_steps is not None:
        kwargs["max_episode_steps"] = config.env.max_episode_steps
    if config.env.step_timeout_s is not None:
        kwargs["step_timeout_s"] = config.env.step_timeout_s
    return kwargs


def build_env(
    config: Config,
    num_envs: int,
    *,
    impl: str | None = None,
    device: Any = None,
    **keywords: Any,
) -> Any:
    """The config's env, built the one way every part of Operant builds it: the trainer (its
    rank's share of env.num_envs, with overlap and workers), preflight's probe (one env), eval
    and eval --video (a time limit, a render mode). env.id, env.impl (else `impl`, already
    resolved), env_kwargs(config), then `keywords` over those; no copy, the trainer reads the
    env's buffers in place. `device`: where a torch env (impl "torch") lives; other families
    ignore it. Raises EnvError (and what building the user's env raises)."""
    from operant.envs import make_env, resolve_impl  # the kernels: not for --help's imports

    resolved = resolve_impl(config.env.id, impl or config.env.impl)
    if device is not None and resolved == "torch":
        keywords = {"device": device, **keywords}
    return make_env(
        config.env.id, num_envs, impl=resolved, copy=False, **{**env_kwargs(config), **keywords}
    )


def load_config(
    path: str | os.PathLike[str] | None = None,
    overrides: Sequence[str] = (),
    extra: dict[str, dict[str, Any]] | None = None,
) -> Config:
    """Config from a TOML file (optional), then `extra` (from dedicated flags), then `--set`s."""
    data: dict[str, Any] = {}
    source = "config"
    if path is not None:
        source = str(path)
        try:
            with open(path, "rb") as handle:
                data = tomllib.load(handle)
        except FileNotFoundError:
            raise ConfigError(f"config file {path} does not exist") from None
        except OSError as error:
            raise ConfigError(f"config file {path} cannot be read: {error.strerror}") from None
        except tomllib.TOMLDecodeError as error:
            raise ConfigError(f"{path}: not valid TOML: {error}") from None
        except UnicodeDecodeError:
            raise ConfigError(
                f"{path}: not valid TOML (not UTF-8 text: is it the config file?)"
            ) from None
    for section, values in (extra or {}).items():
        data.setdefault(section, {}).update(values)
    for assignment in overrides:
        apply_override(data, assignment)
        source = "config (with --set)" if path is None else f"{path} (with --set)"
    try:
        return msgspec.convert(data, Config)
    except msgspec.ValidationError as error:
        raise ConfigError(_describe(error, source)) from None


def to_dict(config: Config) -> dict[str, Any]:
    return msgspec.to_builtins(config)
