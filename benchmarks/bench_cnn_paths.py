"""The CNN's native paths switched on and off in one process, alternating, on real MinAtar
frames, one thread: what each of them is worth to the update and to the rollout's `act`.

    python benchmarks/bench_cnn_paths.py --path loss --rounds 9     # one path against torch
    python benchmarks/bench_cnn_paths.py --path all --rounds 9      # every path against none

Paths: `loss` (the heads and PPO's loss in one call, operant.trainer.loop.ppo_loss), `dense` (the
dense layer by a transposed copy of its weight, operant.trainer.policies.cnn.DenseNN), `adam`
(FlatAdam's floor under its square root), `clip_adam` (the clip and Adam in one native pass, with
the loss), `sampling` (the rollout's categorical in one call), `conv` (the first convolution
from the set cells, operant.trainer.policies.cnn.sparse_conv_relu), `all`. Each round times one
update (3 epochs x 8 minibatches of 1,024 frames, Breakout's shipped PPO settings) and
`act` over 50 batches of 64 frames, with the path on and off in alternating order; reported:
the medians of each, and the median of the rounds' ratios (off / on: above 1, the path is
faster).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_sparse_conv import frames  # noqa: E402

from operant.trainer.config import PPOConfig  # noqa: E402
from operant.trainer.loop import flat as flat_module  # noqa: E402
from operant.trainer.loop import ppo, ppo_loss  # noqa: E402
from operant.trainer.loop.storage import Batch  # noqa: E402
from operant.trainer.policies import cnn, sampling  # noqa: E402
from operant.trainer.policies.cnn import CNNPolicy  # noqa: E402
from operant.trainer.run.allocator import keep_freed_memory  # noqa: E402

# Each path: (module, attribute, the value that switches it off).
SWITCHES = {
    "loss": (ppo_loss, "_native", None),
    "dense": (cnn, "refresh_transposed", None),
    "adam": (flat_module, "_invisible_below", lambda eps, b: None),
    "clip_adam": (ppo_loss, "_clip_adam", None),
    "sampling": (sampling, "_native_categorical", None),
    "conv": (cnn, "sparse_applies", lambda *_: False),
}


def _switch(paths: list[str], on: bool, saved: dict) -> None:
    for path in paths:
        module, name, off = SWITCHES[path]
        setattr(module, name, saved[path] if on else off)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", choices=[*SWITCHES, "all"], default="all")
    parser.add_argument("--game", default="Breakout")
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    torch.set_num_threads(1)
    keep_freed_memory()
    paths = list(SWITCHES) if args.path == "all" else [args.path]
    saved = {path: getattr(SWITCHES[path][0], SWITCHES[path][1]) for path in paths}
    obs = frames(args.game, 8192)
    rows = obs.shape[0]
    torch.manual_seed(0)
    policy = CNNPolicy(tuple(obs.shape[1:]), 6)
    flat = flat_module.FlatParameters(policy)
    optimizer = flat_module.FlatAdam(flat.param, 1e-3)
    config = PPOConfig(update_epochs=3, num_minibatches=8, max_grad_norm=0.5, ent_coef=0.01)
    generator = torch.Generator().manual_seed(0)
    batch = (
        torch.randint(0, 6, (rows,)),
        torch.full((rows,), -1.7),
        *(torch.randn(rows) for _ in range(3)),
    )
    out = (torch.empty(64, dtype=torch.long), torch.empty(64), torch.empty(64))

    def update() -> float:
        started = time.perf_counter()
        path = ppo.update_path(policy, flat, optimizer, config, 1024, torch.device("cpu"))
        ppo.ppo_update(path, Batch(obs, *batch), generator)
        return (time.perf_counter() - started) / 24 * 1e3

    def act() -> float:
        started = time.perf_counter()
        with torch.inference_mode():
            for start in range(0, 64 * 50, 64):
                policy.act(obs[start : start + 64], generator, out)
        return (time.perf_counter() - started) / 50 * 1e6

    times: dict[str, list[float]] = {
        key: [] for key in ("update on", "update off", "act on", "act off")
    }
    for on in (True, False):
        _switch(paths, on, saved)
        update(), act()
    for round_index in range(args.rounds):
        for on in (True, False) if round_index % 2 == 0 else (False, True):
            _switch(paths, on, saved)
            state = "on" if on else "off"
            times[f"update {state}"].append(update())
            times[f"act {state}"].append(act())
    _switch(paths, True, saved)
    for phase, unit in (("update", "ms a minibatch step"), ("act", "us a call of 64 frames")):
        on, off = times[f"{phase} on"], times[f"{phase} off"]
        ratios = [b / a for a, b in zip(on, off)]
        median_on, median_off = statistics.median(on), statistics.median(off)
        print(
            f"{args.path} {phase}: on {median_on:.3f}, off {median_off:.3f} {unit}; "
            f"off/on {statistics.median(ratios):.3f} "
            f"({' '.join(f'{r:.2f}' for r in ratios)})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
