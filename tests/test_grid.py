"""The grid world's kernel against its pure-Python reference (tests/grid_reference.py): the
same rules, the same SplitMix64 streams, stepped side by side from random configurations,
identical observations, rewards, flags and terminal observations; the two observation
encoders agree byte for byte (shadow validation); bad configurations and actions are refused
in one line; profiling and explicit state behave as the face promises."""

from __future__ import annotations

import random
import subprocess
import sys

import numpy as np
import pytest
import traced

from operant.envs import InvalidActionError, make_env
from operant.envs.contract import BatchEnv
from operant.envs.grid.config import GridConfig, GridConfigError
from operant.envs.grid.vector import GridVectorEnv
from tests.grid_reference import ReferenceGrid

LAYOUT = """
#########
#..R....#
#.##.R..#
#R...#..#
#...R..R#
#########
"""


def random_config(rng: random.Random) -> dict:
    """A small world where agents collide often and resources regrow within an episode."""
    if rng.random() < 0.25:
        return dict(
            layout=LAYOUT,
            agents=rng.randint(1, 6),
            window=rng.choice([3, 5]),
            tokens=rng.choice([8, 40]),
            regrow_steps=rng.randint(1, 6),
            max_episode_steps=rng.randint(5, 30),
        )
    width, height = rng.randint(5, 12), rng.randint(5, 12)
    return dict(
        agents=rng.randint(1, 10),
        width=width,
        height=height,
        wall_density=rng.choice([0.0, 0.1, 0.25]),
        resource_density=rng.choice([0.05, 0.2]),
        window=rng.choice([w for w in (3, 5, 7, 9, 11) if w <= min(width, height)]),
        tokens=rng.choice([6, 30, 200]),
        regrow_steps=rng.randint(1, 8),
        max_episode_steps=rng.randint(4, 40),
    )


def as_tokens(row: np.ndarray) -> list[tuple[int, int, int]]:
    return [tuple(int(byte) for byte in token) for token in row]


@pytest.mark.parametrize("case", range(12))
def test_kernel_matches_the_reference(case):
    rng = random.Random(case)
    config = random_config(rng)
    num_envs, seed = rng.randint(1, 3), rng.getrandbits(64)
    env = GridVectorEnv(num_envs, copy=False, encoder=rng.choice(["scan", "sparse"]), **config)
    reference = ReferenceGrid(env.config, num_envs)
    env.reset(seed=seed)
    expected = reference.reset(seed)
    rows, collected, ended = env.layout.num_rows, 0.0, 0
    assert [as_tokens(row) for row in env.obs] == expected
    for _ in range(400):
        actions = [rng.randrange(9) for _ in range(rows)]
        env.step(np.array(actions))
        expected, rewards, truncated, final_obs = reference.step(actions)
        assert env.rewards.tolist() == rewards
        assert env.truncated.tolist() == truncated and not env.terminated.any()
        assert [as_tokens(row) for row in env.obs] == expected
        for row, tokens in final_obs.items():
            assert as_tokens(env.final_obs[row]) == tokens
        collected += sum(rewards)
        ended += len(final_obs)
    assert collected > 0 and ended > 0  # resources were taken, episodes ended and reset


def test_collisions_and_regrowth_follow_the_rules():
    """Two agents in a corridor: they cannot enter a wall, the map's edge or each other's cell;
    a resource gives +1 once, then again `regrow_steps` steps after it was taken."""
    env = GridVectorEnv(
        1,
        copy=False,
        layout="#####\n#R..#\n#####",
        agents=2,
        window=3,
        tokens=20,
        regrow_steps=3,
        max_episode_steps=50,
    )
    env.reset(seed=0)
    kernel = env.kernel
    kernel.occupant[0, :] = 0
    for agent, col in enumerate((2, 3)):  # put the agents at (1, 2) and (1, 3)
        kernel.agent_row[agent], kernel.agent_col[agent] = 1, col
        kernel.occupant[0, 5 + col] = agent + 1
    kernel.row_bits[0, 1, 0] = 0b1110
    west, east, north = 4, 2, 1
    env.step(np.array([east, west]))  # each blocked by the other
    assert (kernel.agent_col.tolist(), env.rewards.tolist()) == ([2, 3], [0.0, 0.0])
    env.step(np.array([north, east]))  # a wall, the map's wall column
    assert kernel.agent_col.tolist() == [2, 3] and kernel.agent_dir.tolist() == [0, 1]
    env.step(np.array([west, 0]))  # onto the resource
    assert env.rewards.tolist() == [1.0, 0.0] and kernel.cell[0, 6] == 3
    earned = []
    for _ in range(4):  # step off and back on: ready again 3 steps after it was taken
        env.step(np.array([east, 0]))
        env.step(np.array([west, 0]))
        earned.append(env.rewards[0])
    assert earned == [0.0, 1.0, 0.0, 1.0]
    assert env.obs_mismatches == 0


def test_shadow_validation_finds_no_mismatch_over_a_million_agent_steps():
    env = GridVectorEnv(
        64,
        copy=False,
        validate=True,
        agents=20,
        width=40,
        height=40,
        wall_density=0.04,
        resource_density=0.05,
        max_episode_steps=300,
    )
    env.reset(seed=11)
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 9, size=(800, env.layout.num_rows))
    for row in actions:
        env.actions[:] = row
        env.step_bound()
    assert 64 * 20 * 800 >= 1_000_000
    assert env.validating and env.obs_mismatches == 0
    # The counter is live: a corrupted bit table makes the encoders disagree.
    env.kernel.row_bits[:] = 0
    env.actions[:] = 0
    env.step_bound()
    assert env.obs_mismatches > 0


def test_maps_wider_than_one_bit_word_match_the_reference():
    """Occupancy rows of several 64-bit words: windows that straddle a word boundary."""
    config = dict(
        agents=12,
        width=130,
        height=15,
        window=15,
        wall_density=0.1,
        resource_density=0.2,
        regrow_steps=3,
        max_episode_steps=25,
    )
    env = GridVectorEnv(2, copy=False, validate=True, **config)
    reference = ReferenceGrid(env.config, 2)
    env.reset(seed=5)
    reference.reset(5)
    rng = random.Random(3)
    for _ in range(60):
        actions = [rng.randrange(9) for _ in range(env.layout.num_rows)]
        env.step(np.array(actions))
        expected = reference.step(actions)[0]
        assert [as_tokens(row) for row in env.obs] == expected
    assert env.obs_mismatches == 0


def test_validation_and_profiling_are_read_from_the_environment_once(monkeypatch):
    monkeypatch.setenv("OPERANT_OBS_VALIDATION", "1")
    monkeypatch.setenv("OPERANT_PROFILING", "1")
    env = GridVectorEnv(2, agents=4)
    monkeypatch.delenv("OPERANT_PROFILING")
    env.reset(seed=1)
    for _ in range(5):
        env.step(np.zeros(8, np.int64))
    timing = env.step_timing
    assert list(timing) == ["reset", "regrowth", "actions", "rewards", "observations", "truncation"]
    assert env.validating and env.profiling and timing["observations"] > 0
    quiet = GridVectorEnv(2, agents=4)
    quiet.reset(seed=1)
    quiet.step(np.zeros(8, np.int64))
    assert not quiet.profiling and set(quiet.step_timing.values()) == {0}


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (dict(agents=200, width=12, height=11), "agents = 200 do not fit the 119 free cells of"),
        (dict(window=13, width=12, height=20), "window 13 is larger than the 12 x 20 map"),
        (dict(window=17, width=40, height=40), "window must be odd and at most 15"),
        (dict(layout="#..\n#.\n"), "row 1 has 2 cells, row 0 has 3"),
        (dict(layout="#.x\n#..\n", window=1), "row 0 column 2: unknown symbol 'x'"),
        (dict(layout="#..\n#R.\n", window=1, agents=4), "agents = 4 do not fit the 3 free cells"),
        (dict(agents=0), "agents must be a positive integer"),
        (dict(colour="red"), "Grid-v0 has no option 'colour'"),
    ],
)
def test_bad_configuration_is_refused_in_one_line(config, message):
    with pytest.raises(GridConfigError, match=message) as error:
        GridVectorEnv(1, **config)
    assert "\n" not in str(error.value)


def test_out_of_range_actions_raise_and_move_nothing():
    env = GridVectorEnv(2, agents=3, copy=False)
    env.reset(seed=4)
    before = {name: value.copy() for name, value in env.state_dict().items()}
    env.actions[:] = 0
    env.actions[4] = 9
    with pytest.raises(InvalidActionError, match=r"action 9 for row 4 \(agent 1 of env 1\)"):
        env.step_bound()
    for name, value in env.state_dict().items():
        assert np.array_equal(value, before[name]), name


def test_state_round_trip_and_statistics_per_agent_and_per_env():
    env = make_env("Grid-v0", 3, copy=False, agents=4, max_episode_steps=10)
    assert isinstance(env, BatchEnv) and env.obs_spec.shape == (200, 3)
    env.reset(seed=9)
    rng = np.random.default_rng(1)
    for _ in range(15):
        env.step(rng.integers(0, 9, 12))
    saved = {name: value.copy() for name, value in env.state_dict().items()}
    twin = make_env("Grid-v0", 3, copy=False, agents=4, max_episode_steps=10)
    twin.load_state_dict(saved)
    for _ in range(10):
        actions = rng.integers(0, 9, 12)
        env.step(actions)
        twin.step(actions)
        assert np.array_equal(env.obs, twin.obs) and np.array_equal(env.rewards, twin.rewards)
    stats = env.drain_episode_stats()
    assert stats.episodes == 2 * 12 and stats.per_env.episodes == 2 * 3
    assert stats.length_mean == 10.0 and stats.per_env.return_sum == stats.return_sum
    assert env.drain_episode_stats().episodes == 0
    assert len(env.recent_returns(100)) == 24


def test_importing_the_grid_face_does_not_import_torch():
    code = "import sys, operant.envs.grid.vector; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "False", result.stderr


def test_config_defaults_fit():
    assert GridConfig().check().free_cells() > GridConfig().agents


def test_pettingzoo_parallel_face_passes_pettingzoos_api_test():
    pytest.importorskip("pettingzoo")
    from pettingzoo.test import parallel_api_test

    from operant.envs.grid.pettingzoo import GridParallelEnv

    parallel_api_test(GridParallelEnv(agents=3, max_episode_steps=20), num_cycles=60)
    env = GridParallelEnv(agents=3, width=8, height=8, window=5, max_episode_steps=5)
    twin = GridVectorEnv(1, copy=False, agents=3, width=8, height=8, window=5, max_episode_steps=5)
    obs, _ = env.reset(seed=2)
    twin.reset(seed=2)
    assert np.array_equal(obs["agent_1"], twin.obs[1])
    for step in range(5):
        actions = {agent: (k + step) % 9 for k, agent in enumerate(env.agents)}
        obs, rewards, terminations, truncations, _ = env.step(actions)
        twin.step(np.array(list(actions.values())))
        assert list(rewards.values()) == twin.rewards.tolist()
    assert all(truncations.values()) and env.agents == []
    assert np.array_equal(obs["agent_2"], twin.final_obs[2])


def test_stepping_allocates_nothing_after_warm_up():
    env = GridVectorEnv(8, copy=False, validate=True, profile=True, agents=6, max_episode_steps=20)
    env.reset(seed=3)
    actions = np.random.default_rng(2).integers(0, 9, size=(60, env.layout.num_rows))
    for row in actions:  # warm-up: the same loop once (Python's own caches fill here)
        env.actions[:] = row
        env.step_bound()

    def steps() -> None:
        for row in actions:
            env.actions[:] = row
            env.step_bound()

    # What this test and tracemalloc allocate themselves (the loop, the snapshots, whose
    # Sequence checks fill abc's caches) is not the env's.
    assert traced.grown(steps, ignore=(__file__, traced.__file__, "<frozen abc>")) == []


def test_a_list_of_seeds_seeds_each_world_as_the_other_families_do():
    """Gymnasium's per-env seed list, one seed a world: world e seeded with s plays as world 0
    of reset(seed=s) (it was refused); a None entry keeps the world's stream; a list of the
    wrong length is one line naming the worlds."""
    from operant.envs import make_env

    three, one = make_env("Grid-v0", 3), make_env("Grid-v0", 1)
    agents = three.layout.agents_per_env
    obs, _ = three.reset(seed=[5, None, 9])
    np.testing.assert_array_equal(obs[:agents], one.reset(seed=5)[0])
    np.testing.assert_array_equal(obs[2 * agents :], one.reset(seed=9)[0])
    with pytest.raises(ValueError, match=r"^Grid-v0 \(3 worlds of \d+ agents\): a list of seeds"):
        three.reset(seed=[1, 2])
    # one seed a row, as generic code builds them from num_envs: a world takes its first
    # agent's (refused before, "one per env: 3 entries")
    rows = [100 + row for row in range(three.num_envs)]
    by_rows, _ = three.reset(seed=rows)
    np.testing.assert_array_equal(by_rows, three.reset(seed=rows[::agents])[0])


def test_gymnasiums_vector_options_say_what_the_grid_does():
    """make_vec's autoreset_mode and render_mode read as a typo ("no option
    'autoreset_mode'"): SAME_STEP and None are taken, the others refused saying why."""
    import gymnasium

    import operant.envs  # noqa: F401

    def make(**options):
        return gymnasium.make_vec(
            "operant/Grid-v0", num_envs=2, vectorization_mode="vector_entry_point", **options
        )

    assert make(autoreset_mode="SameStep", render_mode=None).num_envs > 2
    with pytest.raises(ValueError, match=r"^Grid-v0 autoresets SAME_STEP only"):
        make(autoreset_mode="NextStep")
    with pytest.raises(ValueError, match=r"^Grid-v0 draws no frames: render_mode must be None"):
        make(render_mode="rgb_array")


def test_the_pettingzoo_face_refuses_what_it_once_stepped_silently():
    """After the episode's end an empty action dict steps nothing (a KeyError before) and
    actions are refused (they stepped the world that had already autoreset); a float action
    is not truncated to an integer, an unknown agent not ignored."""
    pytest.importorskip("pettingzoo")
    from operant.envs.grid.pettingzoo import GridParallelEnv

    env = GridParallelEnv(max_episode_steps=3)
    env.reset(seed=0)
    acts = {agent: np.int64(0) for agent in env.agents}
    for bad, message in (
        ({**acts, "agent_99": 1}, r"^actions for agent_99, which are no agents of this world"),
        ({**acts, "agent_0": 1.7}, r"^the action of agent_0 must be an integer in 0 \.\. 8, got 1"),
    ):
        with pytest.raises(ValueError, match=message):
            env.step(bad)
    for _ in range(3):
        _, _, _, truncations, _ = env.step(acts)
    assert env.agents == [] and all(truncations.values())
    assert env.step({}) == ({}, {}, {}, {}, {})
    with pytest.raises(ValueError, match=r"^no agent is live .*: call reset\(\) before stepping"):
        env.step(acts)
    env.reset()
    assert len(env.step(acts)[0]) == len(env.possible_agents)
