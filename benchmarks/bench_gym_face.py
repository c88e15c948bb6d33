"""The native kernels through Gymnasium's API, in one process, alternating round by round.

    python benchmarks/bench_gym_face.py [--num-envs 4096] [--rounds 9] [--steps 2000]

Paths: `step_bound()` (the kernel), `step(env.actions)` and `step(actions)` with copy=False,
and `step(actions)` with copy=True (Gymnasium's default), each on its own env made by
`gymnasium.make_vec("operant/CartPole-v1", vectorization_mode="vector_entry_point")`.
Prints one JSON line: each path's median microseconds per step and kernel / path.

    python benchmarks/bench_gym_face.py --copy [--num-envs 1024] [--rounds 9] [--steps 300]

copy=True against copy=False (issue 37 item 4) for MinAtar's five games and CartPole: two envs
of each id made by `make_vec(..., copy=True)` and `copy=False`, stepped as a user's loop steps
them (`obs, rewards, terminated, truncated, info = env.step(actions)`, so the previous step's
arrays are still held during a step), random actions from a table made beforehand, the two
alternating round by round (which goes first alternating too), and a copy of the env's frames
alone (`np.copyto` into one of two arrays). Prints a table and one JSON line: each env's median
microseconds per step with each copy and for the copy alone, the median of the rounds' ratios
(steps/s with copy=True over steps/s with copy=False), and what copy=False plus that one copy
would give, the most any copy=True can reach on this machine.

    python benchmarks/bench_gym_face.py --copy-parts [--rounds 25] [--steps 100]

Where MinAtar's copy=True step spends its time: the kernel's step alone and with its copies
(`kernel.step_copy`), both faces, and the copy of the frames alone; the fastest of the rounds.
"""

import argparse
import functools
import json
import statistics
import time

import gymnasium
import numpy as np

import operant.envs  # noqa: F401  (registers operant/*)

COPY_IDS = (
    "operant/MinAtar-Asterix-v1",
    "operant/MinAtar-Breakout-v1",
    "operant/MinAtar-Freeway-v1",
    "operant/MinAtar-Seaquest-v1",
    "operant/MinAtar-SpaceInvaders-v1",
    "operant/CartPole-v1",
)
ACTION_TABLE = 64


def user_loop(env, table: np.ndarray, steps: int) -> float:
    """Microseconds a step over `steps` steps of a user's loop: each step's arrays are held
    until the next step has returned, as `obs, ... = env.step(actions)` in a loop holds them."""
    started = time.perf_counter()
    for k in range(steps):
        obs, rewards, terminated, truncated, info = env.step(table[k % ACTION_TABLE])
    elapsed = time.perf_counter() - started
    del obs, rewards, terminated, truncated, info
    return elapsed / steps * 1e6


def frames_copy(obs: np.ndarray, steps: int) -> float:
    """Microseconds a copy of one step's observations alone, into two arrays in turn (as a
    caller holding the previous step's leaves two in use): what one copy costs here."""
    spares = [np.empty_like(obs) for _ in range(2)]
    started = time.perf_counter()
    for k in range(steps):
        np.copyto(spares[k % 2], obs)
    return (time.perf_counter() - started) / steps * 1e6


def copy_ratios(env_id: str, n: int, rounds: int, steps: int) -> dict:
    """copy=True against copy=False for `env_id`, and the copy of its frames alone, the three
    alternating round by round (in reverse order every other round)."""
    envs = {}
    for copy in (False, True):
        envs[copy] = gymnasium.make_vec(
            env_id, num_envs=n, vectorization_mode="vector_entry_point", copy=copy
        )
        envs[copy].reset(seed=0)
    space = envs[False].single_action_space
    table = np.random.default_rng(0).integers(0, space.n, (ACTION_TABLE, n))
    paths = {
        "false": lambda: user_loop(envs[False], table, steps),
        "true": lambda: user_loop(envs[True], table, steps),
        "frames": lambda: frames_copy(envs[False].obs, steps),
    }
    for copy in (False, True):
        user_loop(envs[copy], table, max(steps // 10, 1))  # warm-up
    times: dict[str, list[float]] = {name: [] for name in paths}
    for round_index in range(rounds):
        order = list(paths) if round_index % 2 == 0 else list(reversed(paths))
        for name in order:
            times[name].append(paths[name]())
    for env in envs.values():
        env.close()
    ratios = [live / copied for live, copied in zip(times["false"], times["true"])]
    # copy=True can be no faster than copy=False plus one copy of the frames
    ceilings = [live / (live + copy) for live, copy in zip(times["false"], times["frames"])]
    return {
        "env_id": env_id,
        "frame_bytes": int(envs[False].obs.nbytes),
        "us_per_step_copy_false": round(statistics.median(times["false"]), 2),
        "us_per_step_copy_true": round(statistics.median(times["true"]), 2),
        "us_frames_copy_alone": round(statistics.median(times["frames"]), 2),
        "ratio_true_over_false": round(statistics.median(ratios), 3),
        "ratio_one_copy_allows": round(statistics.median(ceilings), 3),
        "ratio_rounds": [round(ratio, 3) for ratio in ratios],
    }


def main_copy(args: argparse.Namespace) -> None:
    results = []
    print(
        f"N = {args.num_envs}: us a step with copy=False and copy=True, one copy of the frames "
        "alone; steps/s with copy=True over copy=False, and what copy=False plus that one copy "
        "would give (medians of the rounds)"
    )
    for env_id in COPY_IDS:
        result = copy_ratios(env_id, args.num_envs, args.rounds, args.steps)
        results.append(result)
        print(
            f"  {env_id:34} {result['us_per_step_copy_false']:7.1f}"
            f" {result['us_per_step_copy_true']:7.1f} {result['us_frames_copy_alone']:6.1f} us"
            f" ({result['frame_bytes'] // 1024} KiB)"
            f"  ratio {result['ratio_true_over_false']:.3f}"
            f"  one copy allows {result['ratio_one_copy_allows']:.3f}",
            flush=True,
        )
    print(json.dumps({"num_envs": args.num_envs, "rounds": args.rounds, "results": results}))


def copy_parts(env_id: str, n: int, rounds: int, steps: int) -> dict:
    """Where a MinAtar copy=True step's time goes: the kernel's step alone, the kernel's step
    with its copies (`kernel.step_copy` into two arrays in turn), the two faces, and a copy of
    the frames alone; the fastest of `rounds` alternating rounds of each."""
    make = functools.partial(
        gymnasium.make_vec, env_id, num_envs=n, vectorization_mode="vector_entry_point"
    )
    live, copied, bare, copying = (
        make(copy=False),
        make(copy=True),
        make(copy=False),
        make(copy=False),
    )
    for env in (live, copied, bare, copying):
        env.reset(seed=0)
    table = np.random.default_rng(0).integers(0, live.single_action_space.n, (ACTION_TABLE, n))
    spares = [np.zeros_like(live.obs) for _ in range(4)]

    def kernel(env, k: int, copy: bool) -> None:
        np.copyto(env.actions, table[k % ACTION_TABLE])
        if copy:
            env.kernel.step_copy(spares[k % 2], spares[2 + k % 2])
        else:
            env.kernel.step()

    paths = {
        "kernel": lambda k: kernel(bare, k, False),
        "kernel with its copies": lambda k: kernel(copying, k, True),
        "face copy=False": lambda k: live.step(table[k % ACTION_TABLE]),
        "face copy=True": lambda k: copied.step(table[k % ACTION_TABLE]),
        "frames copy alone": lambda k: np.copyto(spares[k % 2], bare.obs),
    }
    times: dict[str, list[float]] = {name: [] for name in paths}
    for round_index in range(rounds):
        order = list(paths) if round_index % 2 == 0 else list(reversed(paths))
        for name in order:
            started = time.perf_counter()
            for k in range(steps):
                paths[name](k)
            times[name].append((time.perf_counter() - started) / steps * 1e6)
    return {"env_id": env_id, **{name: round(min(values), 2) for name, values in times.items()}}


def main_copy_parts(args: argparse.Namespace) -> None:
    print(f"N = {args.num_envs}: us a step, the fastest of {args.rounds} rounds")
    results = []
    for env_id in COPY_IDS[:-1]:  # MinAtar's (CartPole's kernel has no step_copy)
        results.append(copy_parts(env_id, args.num_envs, args.rounds, args.steps))
        print("  " + "  ".join(f"{key} {value}" for key, value in results[-1].items()), flush=True)
    print(json.dumps({"num_envs": args.num_envs, "rounds": args.rounds, "results": results}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--copy", action="store_true", help="copy=True against copy=False")
    parser.add_argument(
        "--copy-parts", action="store_true", help="where MinAtar's copy=True step spends its time"
    )
    parser.add_argument("--num-envs", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=None)
    args = parser.parse_args()
    if args.copy or args.copy_parts:
        args.num_envs = args.num_envs or 1024
        args.steps = args.steps or (300 if args.copy else 100)
        (main_copy if args.copy else main_copy_parts)(args)
        return
    n = args.num_envs = args.num_envs or 4096
    args.steps = args.steps or 2000

    def make(copy: bool):
        env = gymnasium.make_vec(
            "operant/CartPole-v1", num_envs=n, vectorization_mode="vector_entry_point", copy=copy
        )
        env.reset(seed=0)
        return env

    bound, live, copied = make(False), make(False), make(True)
    actions = np.random.default_rng(0).integers(0, 2, n)
    bound.actions[:] = live.actions[:] = actions
    paths = {
        "step_bound": bound.step_bound,
        "step(env.actions), copy=False": lambda: live.step(live.actions),
        "step(actions), copy=False": lambda: live.step(actions),
        "step(actions), copy=True": lambda: copied.step(actions),
    }
    times: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(args.rounds):
        for name, step in paths.items():
            started = time.perf_counter()
            for _ in range(args.steps):
                step()
            times[name].append((time.perf_counter() - started) / args.steps * 1e6)
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(
        json.dumps(
            {
                "num_envs": n,
                "us_per_step": {name: round(value, 2) for name, value in medians.items()},
                "kernel_over_path": {
                    name: round(medians["step_bound"] / value, 3) for name, value in medians.items()
                },
            }
        )
    )


if __name__ == "__main__":
    main()
