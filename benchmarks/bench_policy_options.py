"""The built-in CNN (MinAtar's network) and the token encoder run every way this CPU offers, in
one process, alternating, one thread: what the trainer keeps and why (issue 37).

    python benchmarks/bench_policy_options.py --policy both --rounds 9
    python benchmarks/bench_policy_options.py --policy cnn --options today,eager --rounds 1

Options (each the PPO update's minibatch step and the rollout's `act`):
- `today`: the trainer's path (operant.trainer.loop.ppo.ppo_update and the policy's `act`, with
every
  native piece: the set-cell convolution, the dense layer's transposed copy, the loss and heads
  in one call, the native clip and Adam, Adam's floor, the C im2col, the native categorical,
  the token encoder's layer and max-pool);
- `eager`: the same calls with every native piece switched off (benchmarks/bench_cnn_paths.py's
  switches, the C im2col and the token encoder's kernel): torch eager, the reference;
- `eager-no-onednn` (CNN): `eager` under `torch.backends.mkldnn.flags(enabled=False)` (torch's
  convolution then runs NNPACK's, not oneDNN's);
- `inductor`, `inductor-max-autotune`, `inductor-avx2`: torch.compile (inductor's CPU C++
  backend; mode `default`, mode `max-autotune-no-cudagraphs`, options `cpp.simdlen = 256`) of
  the eager path's loss (`evaluate`, PPO's losses and statistics; autograd's backward compiled
  with it), of the clip and Adam over the flat buffers, and of `HeadsPolicy.act` (its
  `torch.rand` with a generator runs eagerly between two graphs);
- `onednn`: the update as `today`'s with the first convolution by torch's (oneDNN,
  channels-last) instead of the set-cell walk (CNN only: the token encoder has no convolution);
  `act` by `torch.utils.mkldnn.to_mkldnn` modules (oneDNN's inference convolution and linear
  layers, weights reordered once; inference only, so remade after each update: that cost is
  printed beside it) through `HeadsPolicy.act`.

Each option first runs one update and 50 `act` calls (compiles included: their wall times are
printed; a compile past --compile-limit seconds drops the option), then one
minibatch step and one `act` from the same state are checked against `eager`'s (the clipped
gradient, the parameters after Adam, the sampled actions, log-probabilities and values); an
option off by more than float32 rounding is reported and not timed. Then each round times one
update (3 epochs x 8 minibatches of 1,024 rows of 8,192, Breakout's shipped PPO settings) and
`act` over 50 batches of 64 rows per option, the options' order rotated each round. Reported:
the medians, and the medians of the rounds' ratios against `today` and `eager`.

The data: 8,192 Breakout frames of random play; for the token encoder the same frames as
tokens, one per set cell (location row << 4 | col, the channel as feature id, the cell's value),
left-packed and 0xFF-padded to the most cells any frame has set.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import os
import signal
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")
# A fresh inductor cache: the compile times printed are a first compile's.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="inductor-options-"))

import msgspec  # noqa: E402
import torch  # noqa: E402
from torch.utils import mkldnn as torch_mkldnn  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_cnn_paths import SWITCHES, _switch  # noqa: E402
from bench_sparse_conv import frames  # noqa: E402

from operant.trainer.config import PPOConfig  # noqa: E402
from operant.trainer.loop import flat as flat_module  # noqa: E402
from operant.trainer.loop import ppo  # noqa: E402
from operant.trainer.loop.storage import Batch  # noqa: E402
from operant.trainer.policies import cnn as cnn_policy  # noqa: E402
from operant.trainer.policies import token_encoder  # noqa: E402
from operant.trainer.policies.cnn import CNNPolicy  # noqa: E402
from operant.trainer.policies.registry import HeadsPolicy  # noqa: E402
from operant.trainer.policies.token import PAD, TokenPolicy  # noqa: E402
from operant.trainer.run.allocator import keep_freed_memory  # noqa: E402

INVISIBLE_BELOW = flat_module._invisible_below  # (kept: the `adam` switch replaces it)
PATCHES_U8 = cnn_policy.patches_u8
TOKEN_APPLIES = token_encoder.applies
ACTIONS = 6
ACT_BATCH, ACT_CALLS = 64, 50
MODES: dict[str, tuple[str, dict[str, Any]]] = {
    "inductor": ("default", {}),
    "inductor-max-autotune": ("max-autotune-no-cudagraphs", {}),
    "inductor-avx2": ("default", {"cpp.simdlen": 256}),
}
"""torch.compile's mode, or inductor settings (its `options`), per option (`inductor-avx2`:
its C++ kernels written for 256-bit vectors instead of this CPU's 512)."""
OPTIONS = ("today", "eager", "eager-no-onednn", *MODES, "onednn")
TOLERANCE = {"grad": 1e-4, "param": 1e-6, "logprob": 1e-5, "value": 1e-5, "actions": 1}
"""The most an option may differ from `eager` (the gradient relative to its largest element;
the others absolute; `actions`: rows whose sampled action differs, where a uniform falls
within rounding of a CDF step)."""


@dataclasses.dataclass
class Bench:
    policy: HeadsPolicy
    flat: flat_module.FlatParameters
    optimizer: flat_module.FlatAdam
    config: PPOConfig
    obs: torch.Tensor
    batch: tuple[torch.Tensor, ...]
    generator: torch.Generator
    saved: dict[str, Any]
    minibatch: int = 1024
    onednn_policy: Any = None


def native(bench: Bench, on: bool) -> None:
    """Every native piece of the trainer's path on or off (bench_cnn_paths' switches, the
    rollout's C im2col and the token encoder's kernel)."""
    _switch(list(SWITCHES), on, bench.saved)
    cnn_policy.patches_u8 = PATCHES_U8 if on else None
    token_encoder.applies = TOKEN_APPLIES if on else (lambda *_: False)


def minatar_tokens(obs: torch.Tensor) -> torch.Tensor:
    """(B, C, H, W) uint8 frames -> (B, T, 3) tokens: one per set cell, (row << 4 | col,
    channel, value), left-packed, PAD after; T the most cells a frame has set."""
    rows, channel, row, col = obs.nonzero(as_tuple=True)
    counts = torch.bincount(rows, minlength=obs.shape[0])
    starts = torch.cumsum(counts, 0) - counts
    slot = torch.arange(rows.shape[0]) - starts[rows]
    tokens = torch.full((obs.shape[0], int(counts.max()), 3), PAD, dtype=torch.uint8)
    tokens[rows, slot, 0] = (row * 16 + col).to(torch.uint8)
    tokens[rows, slot, 1] = channel.to(torch.uint8)
    tokens[rows, slot, 2] = obs[rows, channel, row, col]
    return tokens


def make_bench(kind: str, game: str) -> Bench:
    obs = frames(game, 8192)
    torch.manual_seed(0)
    if kind == "cnn":
        policy: HeadsPolicy = CNNPolicy(tuple(obs.shape[1:]), ACTIONS)
    else:
        obs = minatar_tokens(obs)
        real = float((obs[..., 1] != PAD).sum(1).float().mean())
        print(f"tokens: {obs.shape[1]} slots a row, {real:.1f} real on average", flush=True)
        policy = TokenPolicy(ACTIONS)
    rows = obs.shape[0]
    flat = flat_module.FlatParameters(policy)
    config = PPOConfig(update_epochs=3, num_minibatches=8, max_grad_norm=0.5, ent_coef=0.01)
    batch = (
        torch.randint(0, ACTIONS, (rows,)),
        torch.full((rows,), -1.7),
        *(torch.randn(rows) for _ in range(3)),
    )
    saved = {path: getattr(module, name) for path, (module, name, _) in SWITCHES.items()}
    return Bench(
        policy,
        flat,
        flat_module.FlatAdam(flat.param, 1e-3),
        config,
        obs,
        batch,
        torch.Generator().manual_seed(0),
        saved,
        rows // config.num_minibatches,
    )


# -- the eager path's pieces, compiled by inductor ------------------------------------------
def loss_and_statistics(policy: HeadsPolicy, config: PPOConfig, obs, actions, logp, *rest):
    """ppo._torch_epoch's loss and statistics for a minibatch, from the same functions."""
    advantages, returns, values = rest
    logprob, entropy, value = policy.evaluate(obs, actions, entropy=True)
    log_ratio = logprob - logp
    ratio = log_ratio.exp()
    policy_loss, value_loss = ppo._losses(config, ratio, advantages, value, returns, values)
    loss = policy_loss + config.vf_coef * value_loss - config.ent_coef * entropy.mean()
    stats = ppo._minibatch_statistics(config, policy_loss, value_loss, entropy, ratio, log_ratio)
    return loss, stats.detach()


def clip_adam(param, grad, exp_avg, exp_avg_sq, scalars, max_norm: float, betas, eps: float):
    """FlatParameters.clip_grad_norm_ and FlatAdam.step's arithmetic, in place; `scalars`:
    (lr / bias correction 1, bias correction 2's root, Adam's floor) as a tensor, so that one
    compiled graph serves every step."""
    norm = torch.linalg.vector_norm(grad)
    grad.mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))
    exp_avg.lerp_(grad, 1 - betas[0])
    exp_avg_sq.mul_(betas[1]).addcmul_(grad, grad, value=1 - betas[1])
    denom = exp_avg_sq.clamp_min(scalars[2]).sqrt().div(scalars[1]).add(eps)
    param.sub_(exp_avg.div(denom).mul(scalars[0]))


def compiled_step(how: dict[str, Any]) -> Callable[[Bench, list[torch.Tensor]], torch.Tensor]:
    """A minibatch step (zero the gradient, loss, backward, clip, Adam) of pieces compiled by
    `torch.compile(..., **how)`."""
    loss_fn = torch.compile(loss_and_statistics, **how)
    adam_fn = torch.compile(clip_adam, **how)

    def step(bench: Bench, minibatch: list[torch.Tensor]) -> torch.Tensor:
        flat, optimizer = bench.flat, bench.optimizer
        flat.zero_grad()
        loss, stats = loss_fn(bench.policy, bench.config, *minibatch)
        loss.backward()
        optimizer.steps += 1
        optimizer.step_count.fill_(optimizer.steps)
        correction = (1 - optimizer.beta2**optimizer.steps) ** 0.5
        floor = INVISIBLE_BELOW(optimizer.eps, correction) or 0.0
        scalars = torch.tensor(
            [optimizer.lr / (1 - optimizer.beta1**optimizer.steps), correction, floor]
        )
        with torch.no_grad():
            adam_fn(
                flat.param.detach(),
                flat.grad,
                optimizer.exp_avg,
                optimizer.exp_avg_sq,
                scalars,
                bench.config.max_grad_norm,
                (optimizer.beta1, optimizer.beta2),
                optimizer.eps,
            )
        return stats

    return step


def loop_update(bench: Bench, step: Callable[[Bench, list[torch.Tensor]], torch.Tensor]) -> None:
    """ppo_update's epochs around `step`: a fresh order per epoch from the same generator, the
    batch gathered once an epoch (index_select), contiguous minibatches, the statistics summed
    on the last epoch."""
    config, rows = bench.config, bench.obs.shape[0]
    sums = torch.zeros(5)
    for epoch in range(config.update_epochs):
        order = torch.randperm(rows, generator=bench.generator)
        gathered = [tensor.index_select(0, order) for tensor in (bench.obs, *bench.batch)]
        for start in range(0, rows, bench.minibatch):
            stats = step(bench, [tensor[start : start + bench.minibatch] for tensor in gathered])
            if epoch == config.update_epochs - 1:
                sums += stats


# -- the options: (update(bench), act(bench, obs, out)) -------------------------------------
def trainer_update(bench: Bench) -> None:
    policy, flat, optimizer, config = bench.policy, bench.flat, bench.optimizer, bench.config
    batch = (bench.obs, *bench.batch)
    path = ppo.update_path(policy, flat, optimizer, config, bench.minibatch, torch.device("cpu"))
    ppo.ppo_update(path, Batch(*batch), bench.generator)


def trainer_act(bench: Bench, obs: torch.Tensor, out: tuple[torch.Tensor, ...]) -> None:
    bench.policy.act(obs, bench.generator, out)


def onednn_act(bench: Bench, obs: torch.Tensor, out: tuple[torch.Tensor, ...]) -> None:
    HeadsPolicy.act(bench.onednn_policy, obs, bench.generator, out)


def onednn_refresh(bench: Bench) -> float:
    """The oneDNN inference copy of the policy's current weights; returns its cost in ms."""
    started = time.perf_counter()
    bench.onednn_policy = torch_mkldnn.to_mkldnn(copy.deepcopy(bench.policy))
    return (time.perf_counter() - started) * 1e3


@dataclasses.dataclass
class Option:
    """An option's update (None: none of its own) and `act`, and the state they run in: the
    native pieces on or off (`conv_native` False: the first convolution by torch's), torch's
    oneDNN on or off. `state` is entered once per timed phase."""

    update: Callable[[Bench], None] | None
    act: Callable[[Bench, torch.Tensor, tuple[torch.Tensor, ...]], None]
    native: bool = False
    conv_native: bool = True
    onednn: bool = True
    act_native: bool | None = None
    """The native pieces for `act`, where they differ from the update's."""

    @contextlib.contextmanager
    def state(self, bench: Bench, phase: str = "update") -> Iterator[None]:
        on = self.native if phase == "update" or self.act_native is None else self.act_native
        native(bench, on)
        if on and not self.conv_native:
            _switch(["conv"], False, bench.saved)
        with torch.backends.mkldnn.flags(enabled=self.onednn):
            yield


def compiled_option(mode: str, settings: dict[str, Any]) -> Option:
    """The update of compiled minibatch steps and the compiled `HeadsPolicy.act`. The settings
    go in as torch.compile's `options`, not as a patch of inductor's config around the calls:
    dynamo's cache of compiled code is per function and per backend, and two backends of the
    same mode and options are equal, so a patched one ran the first one's code."""
    how = {"options": settings} if settings else {"mode": mode}
    step = compiled_step(how)
    act_fn = torch.compile(HeadsPolicy.act, **how)

    def act(bench: Bench, obs: torch.Tensor, out: tuple[torch.Tensor, ...]) -> None:
        act_fn(bench.policy, obs, bench.generator, out)

    return Option(lambda bench: loop_update(bench, step), act)


def make_options(kind: str, names: list[str]) -> dict[str, Option]:
    options: dict[str, Option] = {}
    for name in names:
        if name == "today":
            options[name] = Option(trainer_update, trainer_act, native=True)
        elif name == "eager":
            options[name] = Option(trainer_update, trainer_act)
        elif name == "eager-no-onednn" and kind == "cnn":
            options[name] = Option(trainer_update, trainer_act, onednn=False)
        elif name in MODES:
            options[name] = compiled_option(*MODES[name])
        elif name == "onednn":
            if kind == "cnn":
                options[name] = Option(
                    trainer_update, onednn_act, native=True, conv_native=False, act_native=False
                )
            else:
                options[name] = Option(None, onednn_act)
    return options


# -- checking and timing ----------------------------------------------------------------------
def new_out(rows: int) -> tuple[torch.Tensor, ...]:
    return torch.empty(rows, dtype=torch.long), torch.empty(rows), torch.empty(rows)


def one_step(bench: Bench, option: Option) -> dict[str, torch.Tensor]:
    """One minibatch step (the first 1,024 rows) and one `act` (64 rows) from the current
    state, the same draws each time; the state is restored after."""
    optimizer = bench.optimizer
    tensors = (bench.flat.param, optimizer.exp_avg, optimizer.exp_avg_sq)
    state = [tensor.detach().clone() for tensor in tensors]
    step_count = optimizer.steps
    rows = bench.minibatch
    small = dataclasses.replace(
        bench,
        config=msgspec.structs.replace(bench.config, update_epochs=1, num_minibatches=1),
        obs=bench.obs[:rows],
        batch=tuple(tensor[:rows] for tensor in bench.batch),
        generator=torch.Generator().manual_seed(1),
    )
    result: dict[str, torch.Tensor] = {}
    with option.state(bench):
        if option.update is not None:
            option.update(small)
            result = {"grad": bench.flat.grad.clone(), "param": bench.flat.param.detach().clone()}
        with torch.no_grad():
            for target, saved in zip(tensors, state):
                target.copy_(saved)
        optimizer.steps = step_count
        optimizer.step_count.fill_(step_count)
        small.generator = torch.Generator().manual_seed(2)
    out = new_out(ACT_BATCH)
    with option.state(bench, "act"), torch.inference_mode():
        option.act(small, bench.obs[:ACT_BATCH], out)
    return {**result, "actions": out[0], "logprob": out[1], "value": out[2]}


def differences(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> dict[str, float]:
    """How far `got` is from `want`, in TOLERANCE's terms."""
    found: dict[str, float] = {}
    if "grad" in got:
        scale = float(want["grad"].abs().max())
        found["grad"] = float((got["grad"] - want["grad"]).abs().max()) / scale
        found["param"] = float((got["param"] - want["param"]).abs().max())
    same = got["actions"] == want["actions"]
    found["actions"] = float((~same).sum())
    found["logprob"] = float((got["logprob"] - want["logprob"])[same].abs().max())
    found["value"] = float((got["value"] - want["value"]).abs().max())
    return found


def timed_update(bench: Bench, option: Option) -> float:
    """One whole update; ms a minibatch step."""
    assert option.update is not None
    with option.state(bench):
        started = time.perf_counter()
        option.update(bench)
        elapsed = time.perf_counter() - started
    return elapsed / steps(bench) * 1e3


def steps(bench: Bench) -> int:
    """Minibatch steps an update makes."""
    return bench.config.update_epochs * bench.config.num_minibatches


def timed_act(bench: Bench, option: Option, out: tuple[torch.Tensor, ...]) -> float:
    """`act` over ACT_CALLS batches of ACT_BATCH rows; us a call."""
    with option.state(bench, "act"), torch.inference_mode():
        started = time.perf_counter()
        for start in range(0, ACT_BATCH * ACT_CALLS, ACT_BATCH):
            option.act(bench, bench.obs[start : start + ACT_BATCH], out)
        elapsed = time.perf_counter() - started
    return elapsed / ACT_CALLS * 1e6


def _drop(options: dict, name: str, error: Exception) -> None:
    first = str(error).splitlines()[0] if str(error) else ""
    print(f"{name}: not run: {type(error).__name__} {first}", flush=True)
    del options[name]


class CompileLimit(Exception):
    """An option's first calls ran past --compile-limit."""


def _over_limit(*_: Any) -> None:
    raise CompileLimit


def first_calls(bench: Bench, name: str, option: Option, limit: int) -> dict[str, float]:
    """An option's first update and first ACT_CALLS `act` calls (compiles included), in at most
    `limit` seconds (SIGALRM: the compiler runs in this thread, compile_threads = 1)."""
    previous = signal.signal(signal.SIGALRM, _over_limit)
    signal.alarm(limit)
    try:
        first_update = timed_update(bench, option) * steps(bench) / 1e3 if option.update else 0.0
        if name == "onednn":
            onednn_refresh(bench)
        first_act = timed_act(bench, option, new_out(ACT_BATCH)) * ACT_CALLS * 1e-6
        return {"first_update_s": first_update, "first_act_s": first_act}
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def warm_up_and_check(bench: Bench, options: dict, limit: int) -> dict[str, dict[str, Any]]:
    """Each option's first calls, then its values against eager's; an option that fails
    either is dropped from `options`."""
    report: dict[str, dict[str, Any]] = {}
    for name, option in list(options.items()):
        try:
            report[name] = first_calls(bench, name, option, limit)
        except Exception as error:  # a compiler's refusal or the limit: the option dropped
            _drop(options, name, error)
    reference = one_step(bench, options["eager"])
    for name, option in list(options.items()):
        try:
            if name == "onednn":
                onednn_refresh(bench)
            found = differences(one_step(bench, option), reference)
        except Exception as error:
            _drop(options, name, error)
            continue
        report[name]["check"] = found
        off = [key for key, value in found.items() if not value <= TOLERANCE[key]]
        if off:
            print(f"{name}: values off ({', '.join(off)}): {found}; not timed", flush=True)
            del options[name]
    return report


def measure(bench: Bench, options: dict[str, Option], rounds: int) -> dict[str, list[float]]:
    """`rounds` rounds of one update and ACT_CALLS `act` calls per option, the options' order
    rotated each round; the oneDNN copy remade (untimed, its cost kept) before its `act`."""
    times: dict[str, list[float]] = {}
    out = new_out(ACT_BATCH)
    names = list(options)
    for index in range(rounds):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            option = options[name]
            if option.update is not None:
                times.setdefault(f"{name} update", []).append(timed_update(bench, option))
            if name == "onednn":
                times.setdefault("onednn refresh", []).append(onednn_refresh(bench))
            times.setdefault(f"{name} act", []).append(timed_act(bench, option, out))
    return times


def ratio(times: dict[str, list[float]], key: str, base: str) -> str:
    """The median over rounds of base's time / key's (above 1: `key` is faster)."""
    if key not in times or base not in times:
        return "-"
    return f"{statistics.median(b / a for a, b in zip(times[key], times[base])):.3f}"


def report(kind: str, times: dict[str, list[float]], first: dict, rounds: int) -> None:
    print(
        f"\n{kind}: {rounds} rounds; update: ms a minibatch step (1,024 rows); act: us a call "
        f"(64 rows); x today / x eager: medians of the rounds' time ratios (above 1: faster)"
    )
    print(
        "| option | update ms | x today | x eager | act us | x today | x eager "
        "| first update s | first act s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, seen in first.items():
        cells = [name]
        for phase in ("update", "act"):
            key = f"{name} {phase}"
            median = f"{statistics.median(times[key]):.3f}" if key in times else "-"
            cells += [
                median,
                ratio(times, key, f"today {phase}"),
                ratio(times, key, f"eager {phase}"),
            ]
        cells += [f"{seen['first_update_s']:.1f}", f"{seen['first_act_s']:.1f}"]
        print("| " + " | ".join(cells) + " |")
    if "onednn refresh" in times:
        print(
            "onednn: remaking the oneDNN copy "
            f"{statistics.median(times['onednn refresh']):.3f} ms (once an update)"
        )
    for name, seen in first.items():
        if "check" in seen:
            found = ", ".join(f"{key} {value:.2g}" for key, value in seen["check"].items())
            print(f"check {name} against eager: {found}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", choices=["cnn", "token", "both"], default="both")
    parser.add_argument("--options", default=",".join(OPTIONS))
    parser.add_argument("--game", default="Breakout")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument(
        "--compile-limit", type=int, default=150, help="seconds an option's first calls may take"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message="TF32 acceleration on top of oneDNN")
    torch._inductor.config.compile_threads = 1
    # Three modes of the same functions, the token encoder's varying lengths: more compiled
    # versions of a function than dynamo's default 8 (past them it would run eagerly).
    torch._dynamo.config.recompile_limit = 64
    torch._dynamo.config.accumulated_recompile_limit = 1024
    keep_freed_memory()
    names = args.options.split(",")
    if "eager" not in names:
        names.insert(1, "eager")  # the reference every option is checked against
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} thread, "
        f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}"
    )
    for kind in ("cnn", "token") if args.policy == "both" else (args.policy,):
        bench = make_bench(kind, args.game)
        options = make_options(kind, names)
        first = warm_up_and_check(bench, options, args.compile_limit)
        times = measure(bench, options, args.rounds)
        native(bench, True)
        report(kind, times, first, args.rounds)
        print(f"dynamo: {dict(torch._dynamo.utils.counters['stats'])}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
