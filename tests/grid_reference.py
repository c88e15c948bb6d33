"""The grid world's rules in plain Python: the specification the kernel (cext/envs/grid/grid.h) is
tested against, one env at a time, with the same SplitMix64 streams drawn in the same order.

Readable first: Python ints, dicts and lists, no numpy in the rules. `ReferenceGrid(config,
num_envs)` mirrors GridKernel: `reset(seed)`, then `step(actions)` returning per-row
observations (lists of 3-byte tokens, padded), rewards, truncated flags, and the terminal
observations of rows that ended.
"""

from __future__ import annotations

from operant.envs.grid.config import EMPTY, READY, WALL, GridConfig

MASK = 2**64 - 1
DEPLETED = 3
NORTH, EAST, SOUTH, WEST = range(4)
STEPS = {NORTH: (-1, 0), EAST: (0, 1), SOUTH: (1, 0), WEST: (0, -1)}
OBJECT, ORIENTATION, PROGRESS = 0, 1, 2
OBJECT_VALUE = {WALL: 1, READY: 3, DEPLETED: 4}
AGENT_VALUE = 2
PAD = (0xFF, 0xFF, 0xFF)


class SplitMix64:
    """kernel_common.h's op_rng_next / op_rng_seed."""

    def __init__(self, state: int):
        self.state = state & MASK

    def next(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    def below(self, bound: int) -> int:
        return self.next() % bound

    @classmethod
    def seeded(cls, seed: int, index: int) -> SplitMix64:
        first = cls(seed ^ 0x6A09E667F3BCC909).next()
        return cls(cls((first + index * 0xD1B54A32D192ED03) & MASK).next())


class World:
    """One env: its map, its agents, its resources waiting to regrow."""

    def __init__(self, config: GridConfig, rng: SplitMix64):
        self.config, self.rng = config, rng
        self.width, self.height = config.map_width, config.map_height
        self.reset()

    def reset(self) -> None:
        config, cells = self.config, self.width * self.height
        layout = config.layout_cells()
        if layout is None:
            self.cell = [EMPTY] * cells
            pool, first = list(range(cells)), config.num_walls + config.num_resources
        else:
            self.cell = [int(kind) for kind in layout]
            pool, first = [at for at in range(cells) if self.cell[at] == EMPTY], 0
        for i in range(first + config.agents):  # a partial Fisher-Yates shuffle
            j = i + self.rng.below(len(pool) - i)
            pool[i], pool[j] = pool[j], pool[i]
        for i in range(first):
            self.cell[pool[i]] = WALL if i < config.num_walls else READY
        self.position = [divmod(pool[first + k], self.width) for k in range(config.agents)]
        self.facing = [self.rng.below(4) for _ in range(config.agents)]
        self.waiting: list[tuple[int, int]] = []  # (cell, the step it is ready again)
        self.step_count = 0

    def occupant(self, row: int, col: int) -> int | None:
        for agent, position in enumerate(self.position):
            if position == (row, col):
                return agent
        return None

    def step(self, actions: list[int]) -> list[float]:
        self.step_count += 1
        while self.waiting and self.waiting[0][1] <= self.step_count:
            self.cell[self.waiting.pop(0)[0]] = READY
        order = list(range(self.config.agents))
        for i in range(len(order) - 1, 0, -1):
            j = self.rng.below(i + 1)
            order[i], order[j] = order[j], order[i]
        rewards = [0.0] * self.config.agents
        for agent in order:
            rewards[agent] = self.act(agent, actions[agent])
        return rewards

    def act(self, agent: int, action: int) -> float:
        if action >= 5:
            self.facing[agent] = action - 5
            return 0.0
        if action == 0:
            return 0.0
        self.facing[agent] = action - 1
        d_row, d_col = STEPS[action - 1]
        row, col = self.position[agent][0] + d_row, self.position[agent][1] + d_col
        if not (0 <= row < self.height and 0 <= col < self.width):
            return 0.0
        at = row * self.width + col
        if self.cell[at] == WALL or self.occupant(row, col) is not None:
            return 0.0
        self.position[agent] = (row, col)
        if self.cell[at] != READY:
            return 0.0
        self.cell[at] = DEPLETED
        self.waiting.append((at, self.step_count + self.config.regrow_steps))
        return 1.0

    def observe(self, agent: int) -> list[tuple[int, int, int]]:
        """Agent's tokens: episode progress at the centre, then every cell of its window,
        row-major: the cell's object, then an agent standing there and its orientation."""
        half = self.config.window // 2
        tokens = [
            ((half << 4) | half, PROGRESS, 255 * self.step_count // self.config.max_episode_steps)
        ]
        top, left = self.position[agent][0] - half, self.position[agent][1] - half
        standing = {position: other for other, position in enumerate(self.position)}
        for w_row in range(self.config.window):
            for w_col in range(self.config.window):
                row, col = top + w_row, left + w_col
                if not (0 <= row < self.height and 0 <= col < self.width):
                    continue
                location, kind = (w_row << 4) | w_col, self.cell[row * self.width + col]
                if kind != EMPTY:
                    tokens.append((location, OBJECT, OBJECT_VALUE[kind]))
                other = standing.get((row, col))
                if other is not None:
                    tokens.append((location, OBJECT, AGENT_VALUE))
                    tokens.append((location, ORIENTATION, self.facing[other]))
        tokens = tokens[: self.config.tokens]
        return tokens + [PAD] * (self.config.tokens - len(tokens))


class ReferenceGrid:
    """`num_envs` Worlds; rows are agents (row r is agent r % K of env r // K)."""

    def __init__(self, config: GridConfig, num_envs: int):
        self.config, self.num_envs = config.check(), num_envs

    def reset(self, seed: int) -> list[list[tuple[int, int, int]]]:
        self.worlds = [
            World(self.config, SplitMix64.seeded(seed, env)) for env in range(self.num_envs)
        ]
        return self.observe()

    def observe(self) -> list[list[tuple[int, int, int]]]:
        return [
            world.observe(agent) for world in self.worlds for agent in range(self.config.agents)
        ]

    def step(self, actions: list[int]):
        """(obs, rewards, truncated, final_obs: {row: tokens} for rows that ended)."""
        agents = self.config.agents
        rewards, truncated, final_obs = [], [], {}
        for env, world in enumerate(self.worlds):
            rewards += world.step(actions[env * agents : (env + 1) * agents])
            ended = world.step_count >= self.config.max_episode_steps
            truncated += [ended] * agents
            if ended:
                for agent in range(agents):
                    final_obs[env * agents + agent] = world.observe(agent)
                world.reset()
        return self.observe(), rewards, truncated, final_obs
