"""The CNN policy's first layer from the frames' set cells
(operant.trainer.policies.cnn.sparse_conv_relu) against torch's convolution, on real MinAtar
frames, one thread.

    python benchmarks/bench_sparse_conv.py                 # the layer alone, 1,024 frames
    python benchmarks/bench_sparse_conv.py --trainer 3 [--records DIR]  # bench trainer, alternated
    python benchmarks/bench_sparse_conv.py --baseline-build OLD.so --rounds 9  # two builds' C calls

The layer alone: forward and backward of ReLU(conv) at 1,024 frames a random policy saw,
rounds alternating the two ways, each figure the median of the rounds, with the Trainer's
malloc settings (operant.trainer.run.allocator). `--trainer PAIRS` runs
`operant bench trainer --config configs/minatar/<game>.toml --seeds 1,2,3 --total-steps 81920`
PAIRS times each way, alternating, in this process (the torch way by making
`cnn.sparse_applies` return False), and prints each run's steps/s, phases and share of the
arithmetic bound; `--records DIR` keeps each run's JSON record there
(pair<k>-<sparse|torch>.json).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import tempfile
import time

for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from operant.envs import make_env  # noqa: E402
from operant.trainer.policies import cnn  # noqa: E402
from operant.trainer.run.allocator import keep_freed_memory  # noqa: E402


def frames(game: str, count: int, seed: int = 0) -> torch.Tensor:
    """`count` frames of a random policy's play, 64 envs at a time."""
    env = make_env(f"MinAtar-{game}-v1", 64, impl="native", copy=True)
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(max(1, count // 64) + 10):
        obs = env.step(rng.integers(0, env.single_action_space.n, 64))[0]
        batches.append(torch.from_numpy(np.asarray(obs)))
    return torch.cat(batches[10:])[:count].contiguous()


def _ms(call, repeats: int) -> float:
    call()
    started = time.perf_counter()
    for _ in range(repeats):
        call()
    return (time.perf_counter() - started) / repeats * 1e3


def layer(game: str, rounds: int) -> None:
    batch = frames(game, 1024)
    conv = torch.nn.Conv2d(batch.shape[1], 16, 3)
    dense_input = batch.float().contiguous(memory_format=torch.channels_last)

    def ours() -> None:
        out = cnn.sparse_conv_relu(batch, conv)
        out.backward(torch.ones_like(out))

    def theirs() -> None:
        out = torch.relu(conv(dense_input))
        out.backward(torch.ones_like(out))

    set_share = float((batch != 0).float().mean())
    times: dict[str, list[float]] = {"sparse": [], "torch": []}
    for _ in range(rounds):
        times["sparse"].append(_ms(ours, 20))
        times["torch"].append(_ms(theirs, 20))
    sparse, dense = statistics.median(times["sparse"]), statistics.median(times["torch"])
    print(
        f"{game}: 1,024 frames, {set_share:.1%} of cells set; forward + backward "
        f"{sparse:.2f} ms from the set cells, {dense:.2f} ms torch's conv2d ({dense / sparse:.2f}x)"
    )


def builds(game: str, rounds: int, baseline: str) -> None:
    """The C calls alone, forward and backward, of the installed build against `baseline` (an
    earlier build of operant.cext.sparse_conv, its .so file), alternating, 1,024 frames."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("operant.cext.sparse_conv", baseline)
    if spec is None or spec.loader is None:
        raise SystemExit(f"--baseline-build {baseline}: not a loadable extension module")
    old = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old)
    modules = {"installed": cnn._sparse_native, "baseline": old}
    batch = frames(game, 1024)
    count, channels, height, width = batch.shape
    outs, kernel = 16, 3
    torch.manual_seed(0)
    weight, bias = torch.randn(outs, channels, kernel, kernel) * 0.3, torch.randn(outs) * 0.1
    size = (count, height - kernel + 1, width - kernel + 1, outs)
    grad = torch.randn(size)
    scratch = [torch.empty(channels * kernel * kernel * outs) for _ in range(2)]
    out = {name: torch.empty(size) for name in modules}
    grads = {name: (torch.empty_like(weight), torch.empty(outs)) for name in modules}
    masked = torch.empty(size[1] * size[2] * outs)
    shape = (count, channels, height, width, kernel, outs)

    def forward(name: str) -> None:
        modules[name].forward(
            batch.data_ptr(),
            weight.data_ptr(),
            bias.data_ptr(),
            scratch[0].data_ptr(),
            out[name].data_ptr(),
            *shape,
        )

    def backward(name: str) -> None:
        modules[name].backward(
            batch.data_ptr(),
            out[name].data_ptr(),
            grad.data_ptr(),
            grads[name][0].data_ptr(),
            grads[name][1].data_ptr(),
            scratch[1].data_ptr(),
            masked.data_ptr(),
            *shape,
        )

    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(rounds):
        for name in modules:
            for way, call in (("forward", forward), ("backward", backward)):
                timed = functools.partial(call, name)
                times.setdefault((name, way), []).append(_ms(timed, 20))
    for way in ("forward", "backward"):
        new = statistics.median(times[("installed", way)])
        base = statistics.median(times[("baseline", way)])
        print(f"{game} {way}: installed {new:.3f} ms, baseline {base:.3f} ms ({base / new:.2f}x)")
    same = torch.equal(out["installed"], out["baseline"])
    weights = float((grads["installed"][0] - grads["baseline"][0]).abs().max())
    print(f"outputs equal: {same}; weight gradients differ by at most {weights:.3g}")


def trainer(game: str, pairs: int, records: str | None) -> None:
    from operant.cli import main

    real = cnn.sparse_applies
    for pair in range(pairs):
        for way in ("sparse", "torch"):
            cnn.sparse_applies = real if way == "sparse" else (lambda *_: False)
            with tempfile.TemporaryDirectory() as scratch:
                record = os.path.join(records or scratch, f"pair{pair + 1}-{way}.json")
                argv = ["bench", "trainer", "--config", f"configs/minatar/{game}.toml"]
                argv += ["--seeds", "1,2,3", "--total-steps", "81920", "--output", record]
                if main(argv) != 0:
                    raise SystemExit(f"operant bench trainer failed ({way}, pair {pair + 1})")
                with open(record) as written:
                    summary = json.load(written)["summary"]
            phases = summary["phase_s_mean"]
            print(
                f"pair {pair + 1} {way}: update {phases['update']:.3f} s, rollout forward "
                f"{phases['forward']:.3f} s (means per seed)",
                flush=True,
            )
    cnn.sparse_applies = real


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--game", default="Breakout")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--trainer", type=int, metavar="PAIRS", default=0)
    parser.add_argument("--records", metavar="DIR", help="keep the trainer runs' JSON records")
    parser.add_argument(
        "--baseline-build", metavar="SO", help="time the C calls against this earlier build"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    keep_freed_memory()  # as the Trainer does: freed feature maps are reused, not faulted in
    if args.baseline_build:
        builds(args.game, args.rounds, args.baseline_build)
    elif args.trainer:
        if args.records:
            os.makedirs(args.records, exist_ok=True)
        trainer(args.game, args.trainer, args.records)
    else:
        layer(args.game, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
