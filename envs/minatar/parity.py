"""Parity of the MinAtar kernels (operant.cext.minatar) with the `minatar` package, step by step.

For every env of a kernel and every step: our state is injected into a MinAtar game object
(`to_minatar`), both step with the same action, and MinAtar's observation, reward, terminal
flag and whole next state (`from_minatar`) are compared with ours; where the episode ended,
MinAtar's `reset()` is compared with our autoreset too. The states are those of random-action
episodes, with difficulty ramping, and every `scramble_every` steps a random scramble of each
env's state within the ranges the rules reach (positions, timers, maps, entities), so late
waves and rare layouts are visited too.

Random draws. MinAtar draws from a numpy RandomState, our envs from their own SplitMix64 stream,
so by themselves their spawns differ. Here MinAtar's RandomState is replaced by `StreamReplay`,
a replay of env i's stream (the same uint64 words, turned into `rand()`, `randint()` exactly as
minatar.h turns them into draws). Since the kernel draws in MinAtar's order, MinAtar then draws
what the kernel drew, and spawning transitions are compared in full; a draw made in a different
order, or one more or fewer, shows up as a mismatch (the stream positions are compared too).
What differs without the replay is only which spawn happens, never a rule.

`python -m operant.envs.minatar.parity --steps 500 --envs 64` runs every game and prints the
states checked and the mismatches per game (exit 1 on any); tests/test_minatar.py runs a short
version. Needs the `minatar` package (`pip install "operant-rl[minatar]"`).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from operant.envs.registry import EnvError

MASK64 = (1 << 64) - 1

# Our game names -> MinAtar's module names (minatar.environments.<module>).
MINATAR_MODULES = {
    "breakout": "breakout",
    "freeway": "freeway",
    "space_invaders": "space_invaders",
    "asterix": "asterix",
    "seaquest": "seaquest",
}

# Seaquest's lists: MinAtar's attribute -> (our slot field prefix, fields per entry, the
# scalar holding its length). An entry is MinAtar's list [x, y, direction, timers...].
SEAQUEST_LISTS = {
    "f_bullets": ("f_bullet", 3, "n_f_bullets"),
    "e_bullets": ("e_bullet", 3, "n_e_bullets"),
    "e_fish": ("fish", 4, "n_fish"),
    "e_subs": ("sub", 5, "n_subs"),
    "divers": ("diver", 4, "n_divers"),
}
SEAQUEST_SCALARS = (
    "oxygen",
    "diver_count",
    "sub_x",
    "sub_y",
    "e_spawn_speed",
    "e_spawn_timer",
    "d_spawn_timer",
    "move_speed",
    "ramp_index",
    "shot_timer",
)


def _seaquest_list(kernel: Any, i: int, name: str) -> list[list[int]]:
    """Our env i's Seaquest list `name` (MinAtar's attribute) as MinAtar holds it."""
    from operant.cext.minatar import GAMES

    layout = GAMES["seaquest"]
    prefix, fields, count = SEAQUEST_LISTS[name]
    first = layout["slot_fields"].index(f"{prefix}_x")
    length = int(kernel.scalars[layout["scalars"].index(count), i])
    entries = []
    for k in range(length):
        entry = [int(v) for v in kernel.slots[first : first + fields, i, k]]
        entry[2] = bool(entry[2])
        entries.append(entry)
    return entries


class StreamReplay:
    """A stand-in for MinAtar's numpy RandomState that replays a SplitMix64 stream as the
    kernel reads it (kernel_common.h's op_rng_next; `rand()` is op_rng_uniform's top 53 bits,
    `randint(n)` is the word modulo n)."""

    def __init__(self, state: int):
        self.state = int(state) & MASK64

    def _next(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def rand(self, *size: int) -> Any:
        if not size:
            return (self._next() >> 11) * 2.0**-53
        return np.array([(self._next() >> 11) * 2.0**-53 for _ in range(int(np.prod(size)))])

    def randint(self, low: int, high: int | None = None, size: int | None = None) -> Any:
        if high is None:
            low, high = 0, low
        span = high - low
        if size is None:
            return low + self._next() % span
        return np.array([low + self._next() % span for _ in range(size)])


def minatar_env_class(game: str) -> Any:
    """MinAtar's game class (`minatar.environments.<game>.Env`); ImportError without it."""
    return importlib.import_module(f"minatar.environments.{MINATAR_MODULES[game]}").Env


def _grid(array: np.ndarray) -> np.ndarray:
    """A (10, 10) byte map as MinAtar keeps its maps: float64."""
    return np.array(array, dtype=np.float64)


def to_minatar(kernel: Any, i: int, game_env: Any) -> None:
    """Set MinAtar's game object `game_env` to env i's state in `kernel` (not terminal)."""
    from operant.cext.minatar import GAMES

    layout = GAMES[kernel.game]
    s = {name: int(kernel.scalars[k, i]) for k, name in enumerate(layout["scalars"])}
    slot = {name: kernel.slots[f, i] for f, name in enumerate(layout["slot_fields"])}
    g = game_env
    g.terminal = False
    if kernel.game == "breakout":
        for name in ("ball_x", "ball_y", "ball_dir", "pos", "last_x", "last_y"):
            setattr(g, name, s[name])
        g.strike = bool(s["strike"])
        g.brick_map = _grid(kernel.maps[0, i])
    elif kernel.game == "freeway":
        g.pos, g.move_timer = s["pos"], s["move_timer"]
        g.terminate_timer = s["terminate_timer"]
        g.cars = [
            [int(slot["x"][k]), k + 1, int(slot["timer"][k]), int(slot["speed"][k])]
            for k in range(8)
        ]
    elif kernel.game == "space_invaders":
        for name in layout["scalars"][1:]:
            setattr(g, name, s[name])
        for m, name in enumerate(layout["maps"]):
            setattr(g, name, _grid(kernel.maps[m, i]))
    elif kernel.game == "asterix":
        for name in layout["scalars"][1:]:
            setattr(g, name, s[name])
        g.shot_timer = 0
        g.entities = [
            [int(slot["x"][k]), k + 1, bool(slot["lr"][k]), bool(slot["gold"][k])]
            if slot["active"][k]
            else None
            for k in range(8)
        ]
    elif kernel.game == "seaquest":
        for name in SEAQUEST_SCALARS:
            setattr(g, name, s[name])
        g.sub_or = bool(s["sub_or"])
        g.surface = bool(s["surface"])
        for name in SEAQUEST_LISTS:
            setattr(g, name, _seaquest_list(kernel, i, name))
    else:
        raise ValueError(f"no MinAtar parity for {kernel.game!r}")


def from_minatar(game_env: Any, kernel: Any, i: int) -> None:
    """Set env i's state in `kernel` to MinAtar's game object's (scalars, maps, slots; the
    last action and the stream are left alone)."""
    from operant.cext.minatar import GAMES

    layout = GAMES[kernel.game]
    g = game_env
    scalars = kernel.scalars
    names = layout["scalars"]
    if kernel.game == "breakout":
        for k, name in enumerate(names[1:], 1):
            scalars[k, i] = int(getattr(g, name))
        kernel.maps[0, i] = g.brick_map != 0
    elif kernel.game == "freeway":
        for k, name in enumerate(names[1:], 1):
            scalars[k, i] = int(getattr(g, name))
        for k, car in enumerate(g.cars):
            kernel.slots[:, i, k] = (car[0], car[2], car[3])
    elif kernel.game == "space_invaders":
        for k, name in enumerate(names[1:], 1):
            scalars[k, i] = int(getattr(g, name))
        for m, name in enumerate(layout["maps"]):
            kernel.maps[m, i] = getattr(g, name) != 0
    elif kernel.game == "asterix":
        for k, name in enumerate(names[1:], 1):
            scalars[k, i] = int(getattr(g, name))
        for k, entity in enumerate(g.entities):
            if entity is None:
                kernel.slots[:, i, k] = 0
            else:
                kernel.slots[:, i, k] = (1, entity[0], int(entity[2]), int(entity[3]))
    elif kernel.game == "seaquest":
        for name in (*SEAQUEST_SCALARS, "sub_or", "surface"):
            scalars[names.index(name), i] = int(getattr(g, name))
        kernel.slots[:, i] = 0
        for name, (prefix, fields, count) in SEAQUEST_LISTS.items():
            entries = getattr(g, name)
            first = layout["slot_fields"].index(f"{prefix}_x")
            scalars[names.index(count), i] = len(entries)
            for k, entry in enumerate(entries):
                kernel.slots[first : first + fields, i, k] = [int(v) for v in entry]
    else:
        raise ValueError(f"no MinAtar parity for {kernel.game!r}")


def game_state(kernel: Any, i: int) -> dict[str, Any]:
    """Env i's state as comparable values (inactive Asterix slots compare as empty)."""
    slots = kernel.slots[:, i].copy()
    if kernel.game == "asterix":
        slots[:, slots[0] == 0] = 0
    if kernel.game == "seaquest":
        return {
            "scalars": kernel.scalars[1:, i].tolist(),
            "lists": {name: _seaquest_list(kernel, i, name) for name in SEAQUEST_LISTS},
        }
    return {
        "scalars": kernel.scalars[1:, i].tolist(),
        "maps": kernel.maps[:, i].tolist(),
        "slots": slots.tolist(),
    }


def scramble(kernel: Any, i: int, rng: np.random.Generator) -> None:
    """Put env i in a random state the rules can reach (or nearly: combinations of reachable
    values), keeping its last action and stream."""
    from operant.cext.minatar import GAMES

    names = GAMES[kernel.game]["scalars"]
    s = {name: k for k, name in enumerate(names)}
    sc, maps, slots = kernel.scalars, kernel.maps, kernel.slots
    if kernel.game == "breakout":
        sc[s["ball_x"], i] = rng.integers(0, 10)
        sc[s["ball_y"], i] = rng.integers(0, 9)
        sc[s["ball_dir"], i] = rng.integers(0, 4)
        sc[s["pos"], i] = rng.integers(0, 10)
        sc[s["last_x"], i] = rng.integers(0, 10)
        sc[s["last_y"], i] = rng.integers(0, 9)
        sc[s["strike"], i] = rng.integers(0, 2)
        bricks = np.zeros((10, 10), np.uint8)
        bricks[1:4] = rng.random((3, 10)) < rng.choice([0.0, 0.05, 0.5, 1.0])
        maps[0, i] = bricks
    elif kernel.game == "freeway":
        sc[s["pos"], i] = rng.integers(0, 10)
        sc[s["move_timer"], i] = rng.integers(0, 4)
        sc[s["terminate_timer"], i] = rng.choice([int(rng.integers(0, 2501)), 0, 1])
        speed = rng.integers(1, 6, 8) * rng.choice([-1, 1], 8)
        slots[0, i] = rng.integers(0, 10, 8)
        slots[1, i] = rng.integers(0, np.abs(speed) + 1)
        slots[2, i] = speed
    elif kernel.game == "space_invaders":
        sc[s["pos"], i] = rng.integers(0, 10)
        sc[s["alien_dir"], i] = rng.choice([-1, 1])
        interval = int(rng.integers(6, 13))
        sc[s["enemy_move_interval"], i] = interval
        sc[s["ramp_index"], i] = 12 - interval
        sc[s["alien_shot_timer"], i] = rng.integers(0, 11)
        sc[s["shot_timer"], i] = rng.integers(0, 6)
        aliens = np.zeros((10, 10), np.uint8)
        top, left = rng.integers(0, 6), rng.integers(0, 5)
        aliens[top : top + 4, left : left + 6] = rng.random((4, 6)) < rng.choice([0.1, 0.5, 0.9])
        if not aliens.any():
            aliens[top, left] = 1
        maps[0, i] = aliens
        sc[s["alien_move_timer"], i] = rng.integers(0, min(int(aliens.sum()), interval) + 1)
        maps[1, i] = rng.random((10, 10)) < 0.05
        maps[2, i] = rng.random((10, 10)) < 0.05
    elif kernel.game == "asterix":
        sc[s["player_x"], i] = rng.integers(0, 10)
        sc[s["player_y"], i] = rng.integers(1, 9)
        spawn_speed, move_speed = rng.integers(1, 11), rng.integers(1, 6)
        sc[s["spawn_speed"], i] = spawn_speed
        sc[s["spawn_timer"], i] = rng.integers(0, spawn_speed + 1)
        sc[s["move_speed"], i] = move_speed
        sc[s["move_timer"], i] = rng.integers(0, move_speed + 1)
        sc[s["ramp_timer"], i] = rng.integers(-1, 101)
        sc[s["ramp_index"], i] = rng.integers(0, 20)
        slots[0, i] = rng.random(8) < rng.choice([0.2, 0.6, 1.0])
        slots[1, i] = rng.integers(0, 10, 8)
        slots[2, i] = rng.integers(0, 2, 8)
        slots[3, i] = rng.random(8) < 1 / 3
    elif kernel.game == "seaquest":
        _scramble_seaquest(kernel, i, rng)


def _scramble_seaquest(kernel: Any, i: int, rng: np.random.Generator) -> None:
    from operant.cext.minatar import GAMES

    layout = GAMES["seaquest"]
    names, fields = layout["scalars"], layout["slot_fields"]
    sc, slots = kernel.scalars, kernel.slots

    def put(name: str, value: Any) -> None:
        sc[names.index(name), i] = int(value)

    sub_y = rng.choice([0, int(rng.integers(0, 9))])
    move_speed = rng.integers(2, 6)
    spawn_speed = rng.integers(1, 21)
    sub_x = rng.integers(0, 10)
    put("sub_x", sub_x)
    put("sub_y", sub_y)
    # the sub reaches the right edge moving right and the left edge moving left
    put("sub_or", 1 if sub_x == 9 else 0 if sub_x == 0 else rng.integers(0, 2))
    put("surface", sub_y == 0)
    put("oxygen", rng.choice([int(rng.integers(0, 201)), 1, 2, 200]))
    put("diver_count", rng.choice([int(rng.integers(0, 7)), 5, 6, -1]))
    put("e_spawn_speed", spawn_speed)
    put("e_spawn_timer", rng.integers(0, spawn_speed + 1))
    put("d_spawn_timer", rng.integers(0, 31))
    put("move_speed", move_speed)
    put("ramp_index", rng.integers(0, 30))
    put("shot_timer", rng.integers(0, 6))
    slots[:, i] = 0
    for prefix, width, count in SEAQUEST_LISTS.values():
        length = int(rng.integers(0, 6 if prefix.endswith("bullet") else 10))
        first = fields.index(f"{prefix}_x")
        put(count, length)
        for k in range(length):
            entry = [
                rng.integers(0, 10),
                rng.integers(0 if prefix == "f_bullet" else 1, 9),
                rng.integers(0, 2),
                rng.integers(0, (5 if prefix == "diver" else move_speed) + 1),
                rng.integers(0, 11),
            ]
            slots[first : first + width, i, k] = entry[:width]


@dataclass
class ParityReport:
    """What one game's parity run checked."""

    game: str
    states: int = 0
    drawing: int = 0
    """Steps that drew from the stream: spawns, resets, sticky actions."""
    terminal: int = 0
    mismatches: int = 0
    longest_list: int = 0
    """Seaquest: the longest of its lists in any state checked (the kernel holds 64)."""
    first: list[str] = field(default_factory=list)

    def mismatch(self, text: str) -> None:
        self.mismatches += 1
        if len(self.first) < 5:
            self.first.append(text)


@dataclass
class _KernelBuffers:
    """The arrays a MinAtarKernel reads its actions from and writes its step results into."""

    actions: np.ndarray
    obs: np.ndarray
    final_obs: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray


def _kernel_and_buffers(
    game: str, num_envs: int, seed: int, sticky_action_prob: float, difficulty_ramping: bool
) -> tuple[Any, _KernelBuffers]:
    """A reset kernel of `num_envs` envs of `game`, and the buffers it steps through."""
    from operant.cext.minatar import GAMES, MinAtarKernel

    channels = len(GAMES[game]["channels"])
    obs = np.zeros((num_envs, channels, 10, 10), np.uint8)
    buffers = _KernelBuffers(
        actions=np.zeros(num_envs, np.int64),
        obs=obs,
        final_obs=np.zeros_like(obs),
        rewards=np.zeros(num_envs, np.float32),
        terminated=np.zeros(num_envs, np.bool_),
        truncated=np.zeros(num_envs, np.bool_),
    )
    kernel = MinAtarKernel(
        game,
        num_envs,
        buffers.actions,
        buffers.obs,
        buffers.rewards,
        buffers.terminated,
        buffers.truncated,
        buffers.final_obs,
        sticky_action_prob=sticky_action_prob,
        difficulty_ramping=difficulty_ramping,
    )
    kernel.reset(seed)
    return kernel, buffers


def _inject_states(
    kernel: Any, envs: list[Any], obs: np.ndarray, step: int, report: ParityReport
) -> list[StreamReplay]:
    """Copy each kernel env's state into its MinAtar env, give each a replay of its random
    stream, and check the injected state observes as ours does. Returns the replays."""
    replays = []
    for i, env in enumerate(envs):
        to_minatar(kernel, i, env.env)
        env.last_action = int(kernel.scalars[0, i])
        replay = StreamReplay(int(kernel.rng_state[i]))
        env.random = env.env.random = replay
        replays.append(replay)
        if not np.array_equal(obs[i], env.state().transpose(2, 0, 1)):
            report.mismatch(f"step {step} env {i}: injected state observes differently")
    return replays


def _check_step_result(
    env: Any,
    i: int,
    where: str,
    reward: float,
    terminal: bool,
    buffers: _KernelBuffers,
    report: ParityReport,
) -> None:
    """Check env `i`'s terminal flag, reward and observation against MinAtar's step; on a
    terminal step, reset MinAtar's env and check the next episode's first observation."""
    terminated, obs = buffers.terminated, buffers.obs
    if terminated[i] != bool(terminal):
        report.mismatch(f"{where}: terminal {bool(terminal)}, ours {terminated[i]}")
    if buffers.rewards[i] != reward:
        report.mismatch(f"{where}: reward {reward}, ours {buffers.rewards[i]}")
    theirs = env.state().transpose(2, 0, 1)
    ours = buffers.final_obs[i] if terminated[i] else obs[i]
    if not np.array_equal(ours, theirs):
        diff = np.argwhere(ours != theirs)[:4].tolist()
        report.mismatch(f"{where}: observation differs at (channel, row, col) {diff}")
    if terminated[i]:
        report.terminal += 1
        env.reset()
        if not np.array_equal(obs[i], env.state().transpose(2, 0, 1)):
            report.mismatch(f"{where}: the next episode's first observation differs")


def _check_next_state(
    kernel: Any,
    env: Any,
    i: int,
    where: str,
    replay: StreamReplay,
    start: int,
    sticky_action_prob: float,
    report: ParityReport,
) -> None:
    """Check env `i` drew as many random values as MinAtar did and that MinAtar's next state,
    read into our layout, equals ours (last action too, when actions are sticky)."""
    if start != replay.state:
        report.drawing += 1
    if replay.state != int(kernel.rng_state[i]):
        report.mismatch(f"{where}: MinAtar drew a different number of values")
    ours_state = game_state(kernel, i)
    if kernel.game == "seaquest":
        lengths = [len(entries) for entries in ours_state["lists"].values()]
        report.longest_list = max(report.longest_list, *lengths)
    probe = _probe(kernel)
    from_minatar(env.env, probe, 0)
    if game_state(probe, 0) != ours_state:
        report.mismatch(f"{where}: next state differs: ours {ours_state}")
    if int(kernel.scalars[0, i]) != env.last_action and sticky_action_prob:
        report.mismatch(f"{where}: last action {env.last_action}, ours differs")


def check_game(
    game: str,
    num_envs: int = 32,
    steps: int = 200,
    seed: int = 0,
    scramble_every: int = 25,
    sticky_action_prob: float = 0.0,
    difficulty_ramping: bool = True,
) -> ParityReport:
    """Step a kernel of `num_envs` envs of `game` for `steps` random actions, checking every env
    at every step against MinAtar (module docstring)."""
    from operant.envs.minatar.reference import minatar_environment_class

    Environment = minatar_environment_class()
    kernel, buffers = _kernel_and_buffers(
        game, num_envs, seed, sticky_action_prob, difficulty_ramping
    )
    rng = np.random.default_rng(seed)
    envs = [
        Environment(
            MINATAR_MODULES[game],
            sticky_action_prob=sticky_action_prob,
            difficulty_ramping=difficulty_ramping,
        )
        for _ in range(num_envs)
    ]
    report = ParityReport(game)
    action_set = np.array(kernel.action_set)
    for step in range(steps):
        if scramble_every and step % scramble_every == scramble_every - 1:
            for i in range(num_envs):
                scramble(kernel, i, rng)
            kernel.write_obs()
        buffers.actions[:] = rng.integers(0, len(action_set), num_envs)
        replays = _inject_states(kernel, envs, buffers.obs, step, report)
        starts = [replay.state for replay in replays]
        bad = kernel.step()
        assert bad < 0
        for i, env in enumerate(envs):
            action = int(action_set[buffers.actions[i]])
            reward, terminal = env.act(action) if sticky_action_prob else env.env.act(action)
            report.states += 1
            where = f"step {step} env {i} action {action}"
            _check_step_result(env, i, where, reward, terminal, buffers, report)
            _check_next_state(
                kernel, env, i, where, replays[i], starts[i], sticky_action_prob, report
            )
    return report


_PROBES: dict[str, Any] = {}


def _probe(kernel: Any) -> Any:
    """A one-env kernel of the same game, to read MinAtar's state into our layout."""
    from operant.cext.minatar import GAMES, MinAtarKernel

    probe = _PROBES.get(kernel.game)
    if probe is None:
        channels = len(GAMES[kernel.game]["channels"])
        obs = np.zeros((1, channels, 10, 10), np.uint8)
        probe = MinAtarKernel(
            kernel.game,
            1,
            np.zeros(1, np.int64),
            obs,
            np.zeros(1, np.float32),
            np.zeros(1, np.bool_),
            np.zeros(1, np.bool_),
            np.zeros_like(obs),
        )
        _PROBES[kernel.game] = probe
    probe.scalars[:] = 0
    probe.maps[:] = 0
    probe.slots[:] = 0
    return probe


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m operant.envs.minatar.parity", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--games", nargs="*", default=list(MINATAR_MODULES))
    parser.add_argument("--envs", type=int, default=64)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scramble-every", type=int, default=25)
    parser.add_argument("--sticky-action-prob", type=float, default=0.0)
    args = parser.parse_args(argv)
    unknown = [game for game in args.games if game not in MINATAR_MODULES]
    if unknown:
        parser.exit(
            2, f"{parser.prog}: unknown game {unknown[0]!r}: {', '.join(MINATAR_MODULES)}\n"
        )
    failed = False
    for game in args.games:
        try:
            report = check_game(
                game,
                args.envs,
                args.steps,
                args.seed,
                args.scramble_every,
                args.sticky_action_prob,
            )
        except EnvError as error:  # the minatar extra not installed: one line, as bench says it
            parser.exit(2, f"{parser.prog}: {error}\n")
        print(
            f"{game}: {report.states} states checked ({report.drawing} drew from the stream, "
            f"{report.terminal} terminal), {report.mismatches} mismatches"
            + (f", longest list {report.longest_list}" if game == "seaquest" else "")
        )
        for line in report.first:
            print(f"  {line}")
        failed |= report.mismatches > 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
