"""TrafficJunction, ported from ma-gym (MIT License, Anurag Koul; the
environment of Sukhbaatar et al., "Learning Multiagent Communication with
Backpropagation", 2016) to a seeded, dependency-free form: the same rules,
grid, routes, rewards and observations as ``ma_gym``'s ``TrafficJunction``
(version 0.0.14), with its module-level ``random`` replaced by the
environment's own ``random.Random(seed)`` so that runs repeat exactly.

A 4-way junction on a 14 x 14 grid. Up to ``n_max`` (1-10) cars, one per
agent; each step a waiting car enters at a free gate with probability
``arrive_prob``, on one of three routes (forward, turn right, turn left).
An agent's actions: 0 gas (one cell along its route), 1 brake. A move
into a cell holding a car is a collision (reward -10, the car stays). Each
car on the road gets -0.01 x its steps on the road every step. An agent
sees its 3 x 3 neighbourhood: for each cell holding a car, that car's id
(one-hot, n_max), location (2) and route (one-hot, 3).
"""

from __future__ import annotations

import random

import numpy as np

GAS, BRAKE = 0, 1
ROUTES = 3


class TrafficJunction:
    def __init__(self, n_max: int = 4, grid: int = 14, arrive_prob: float = 0.5, max_steps: int = 100, step_cost: float = -0.01, collision_reward: float = -10.0, seed: int = 0) -> None:
        if not 1 <= n_max <= 10:
            raise ValueError(f"TrafficJunction: n_max {n_max} is out of range; give 1 to 10 agents")
        self.n, self.g = n_max, grid
        self.arrive_prob, self.max_steps = arrive_prob, max_steps
        self.step_cost, self.collision_reward = step_cost, collision_reward
        self.rng = random.Random(seed)
        h = grid // 2
        # Spawn gate -> direction of travel; keeping right, as ma-gym does.
        self.route_vectors = {(h, 0): (0, 1), (grid - 1, h): (-1, 0), (0, h - 1): (1, 0), (h - 1, grid - 1): (0, -1)}
        self.gates = [(h, 0), (grid - 1, h), (h - 1, grid - 1), (0, h - 1)]
        self.destinations = {(h, grid - 1), (0, h), (h - 1, 0), (grid - 1, h - 1)}
        # Direction -> (where route 2 turns right, where route 3 turns left).
        self.turning = {
            (0, 1): ((h, h - 1), (h, h)),
            (-1, 0): ((h, h), (h - 1, h)),
            (1, 0): ((h - 1, h - 1), (h, h - 1)),
            (0, -1): ((h - 1, h), (h - 1, h - 1)),
        }
        self.obs_dim = 9 * (self.n + 2 + ROUTES)
        self.reset()

    def _road(self, pos: tuple[int, int]) -> bool:
        r, c = pos
        h = self.g // 2
        return 0 <= r < self.g and 0 <= c < self.g and (r in (h - 1, h) or c in (h - 1, h))

    def reset(self) -> list[np.ndarray]:
        self.steps = 0
        self.car_steps = [0] * self.n
        self.done = [False] * self.n
        self.on_road = [False] * self.n
        self.turned = [False] * self.n
        self.routes = [-1] * self.n
        self.direction = [(0, 0)] * self.n
        self.pos: list[tuple[int, int]] = [(0, 0)] * self.n
        self.cell: dict[tuple[int, int], int] = {}  # occupied road cell -> agent
        gates = list(self.route_vectors)
        self.rng.shuffle(gates)
        for i in range(min(self.n, len(gates))):
            self._enter(i, gates[i])
        return self.observations()

    def _enter(self, i: int, gate: tuple[int, int]) -> None:
        self.direction[i] = self.route_vectors[gate]
        self.pos[i] = gate
        self.on_road[i] = True
        self.turned[i] = False
        self.routes[i] = self.rng.randint(1, ROUTES)
        self.cell[gate] = i

    def _move(self, i: int) -> bool:
        """Gas for agent i; True on a collision (the car stays)."""
        cur, route = self.pos[i], self.routes[i]
        d = self.direction[i]
        if route != 1 and cur == self.turning[d][route - 2] and not self.turned[i]:
            if route == 2:
                sig = 1 if d[1] != 0 else -1
            else:
                sig = -1 if d[1] != 0 else 1
            d = (d[1] * sig, 0) if d[0] == 0 else (0, d[0] * sig)
            self.direction[i], self.turned[i] = d, True
        nxt = (cur[0] + d[0], cur[1] + d[1])
        if nxt in self.cell:
            return True
        if self._road(nxt):
            del self.cell[cur]
            self.cell[nxt] = i
            self.pos[i] = nxt
        return False

    def step(self, actions: list[int]) -> tuple[list[np.ndarray], list[float], list[bool], int]:
        if len(actions) != self.n:
            raise ValueError(f"TrafficJunction: {len(actions)} actions for {self.n} agents")
        self.steps += 1
        rewards = [0.0] * self.n
        collisions = 0
        for i, a in enumerate(actions):
            if a not in (GAS, BRAKE):
                raise ValueError(f"TrafficJunction: action {a!r} of agent {i}; actions are 0 (gas) and 1 (brake)")
            if not self.done[i] and self.on_road[i]:
                self.car_steps[i] += 1
                if a == GAS and self._move(i):
                    rewards[i] += self.collision_reward
                    collisions += 1
                rewards[i] += self.step_cost * self.car_steps[i]
            if self.on_road[i] and not self.done[i] and self.pos[i] in self.destinations:
                self.done[i] = True
                self.cell.pop(self.pos[i], None)
            if self.steps >= self.max_steps:
                self.done[i] = True
        if self.rng.uniform(0, 1) < self.arrive_prob:
            free = [g for g in self.gates if g not in self.pos]
            if not all(self.on_road) and free:
                self._enter(self.on_road.index(False), self.rng.choice(free))
        return self.observations(), rewards, list(self.done), collisions

    def observations(self) -> list[np.ndarray]:
        width = self.n + 2 + ROUTES
        features = np.zeros((self.n, width), np.float32)
        for i in range(self.n):
            features[i, i] = 1.0
            features[i, self.n] = self.pos[i][0] / (self.g - 1)
            features[i, self.n + 1] = self.pos[i][1] / (self.g - 1)
            # A car not yet on the road has route -1, which ma-gym's indexing
            # writes into the second route slot: kept, for the same observations.
            features[i, self.n + 2 + (self.routes[i] - 1) % ROUTES] = 1.0
        out = []
        for i in range(self.n):
            r0, c0 = self.pos[i]
            view = np.zeros((3, 3, width), np.float32)
            for r in range(max(0, r0 - 1), min(r0 + 2, self.g)):
                for c in range(max(0, c0 - 1), min(c0 + 2, self.g)):
                    j = self.cell.get((r, c))
                    if j is not None:
                        view[r - r0 + 1, c - c0 + 1] = features[j]
            out.append(view.reshape(-1))
        return out
