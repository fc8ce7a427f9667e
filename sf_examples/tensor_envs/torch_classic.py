"""gymnasium's CartPole-v1 and Pendulum-v1 written in torch: one object steps `num_agents` copies as tensors on the
CPU or a GPU and resets a copy whose episode ended inside the same step, IsaacGym style. This module imports nothing
of sf, so Sample Factory's benchmark launcher (`sf/bench/tensor_env_sample_factory.py`) loads the same classes."""

from __future__ import annotations

import math
from typing import Any

import gymnasium
import numpy as np
import torch
from gymnasium import spaces


class TensorEnv(gymnasium.Env):
    """What the two envs share: copies, device, a time limit per copy, the step counters and the auto-reset."""

    max_episode_steps: int

    def __init__(self, num_agents: int, device: str = "cpu", seed: int | None = None):
        self.num_agents = num_agents
        self.is_multiagent = True  # Sample Factory's flag for an env of several rows (its IsaacGym envs set it)
        self.device = torch.device(device)
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(seed if seed is not None else int(np.random.SeedSequence().entropy % 2**63))
        self.steps = torch.zeros(num_agents, dtype=torch.int64, device=self.device)
        self.state = torch.zeros(num_agents, self.state_size, device=self.device)

    state_size: int

    def _uniform(self, n: int, low: float, high: float) -> torch.Tensor:
        u = torch.rand((n, self.state_size), generator=self.generator, device=self.device)
        return low + (high - low) * u

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[torch.Tensor, dict]:
        if seed is not None:
            self.generator.manual_seed(seed)
        self.state = self._initial_state(self.num_agents)
        self.steps.zero_()
        return self._obs(), {}

    def step(self, actions: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict]:
        actions = torch.as_tensor(actions, device=self.device)
        rewards, terminated, stats = self._advance(actions)
        self.steps += 1
        truncated = (self.steps >= self.max_episode_steps) & ~terminated
        ended = terminated | truncated
        infos = {"episode_extra_stats": stats}
        if bool(ended.any()):
            rows = ended.nonzero(as_tuple=True)[0]
            self.state[rows] = self._initial_state(len(rows))
            self.steps[rows] = 0
        return self._obs(), rewards, terminated, truncated, infos

    def close(self) -> None:
        pass

    def _initial_state(self, n: int) -> torch.Tensor:
        raise NotImplementedError

    def _advance(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, dict]:
        raise NotImplementedError

    def _obs(self) -> torch.Tensor:
        raise NotImplementedError


class TensorCartPole(TensorEnv):
    """gymnasium's CartPole-v1, every copy at once (Euler integration, the same constants and limits)."""

    state_size = 4
    max_episode_steps = 500
    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    theta_limit = 12 * 2 * math.pi / 360
    x_limit = 2.4

    def __init__(self, num_agents: int, device: str = "cpu", seed: int | None = None):
        super().__init__(num_agents, device, seed)
        inf = np.finfo(np.float32).max
        high = np.array([self.x_limit * 2, inf, self.theta_limit * 2, inf], dtype=np.float32)
        self.observation_space = spaces.Box(-high, high, dtype=np.float32)
        self.action_space = spaces.Discrete(2)

    def _initial_state(self, n: int) -> torch.Tensor:
        return self._uniform(n, -0.05, 0.05)

    def _advance(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, dict]:
        x, x_dot, theta, theta_dot = self.state.unbind(1)
        force = (actions.reshape(-1).to(torch.float32) * 2 - 1) * self.force_mag
        cos, sin = torch.cos(theta), torch.sin(theta)
        total_mass = self.masspole + self.masscart
        polemass_length = self.masspole * self.length
        temp = (force + polemass_length * theta_dot**2 * sin) / total_mass
        theta_acc = (self.gravity * sin - cos * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * cos**2 / total_mass)
        )
        x_acc = temp - polemass_length * theta_acc * cos / total_mass
        x = x + self.tau * x_dot
        x_dot = x_dot + self.tau * x_acc
        theta = theta + self.tau * theta_dot
        theta_dot = theta_dot + self.tau * theta_acc
        self.state = torch.stack((x, x_dot, theta, theta_dot), 1)
        terminated = (x.abs() > self.x_limit) | (theta.abs() > self.theta_limit)
        rewards = torch.ones(self.num_agents, device=self.device)
        return rewards, terminated, {"final_abs_x": x.abs()}

    def _obs(self) -> torch.Tensor:
        return self.state.clone()


class TensorPendulum(TensorEnv):
    """gymnasium's Pendulum-v1, every copy at once: swing up and hold; torque in [-2, 2]."""

    state_size = 2
    max_episode_steps = 200
    max_speed, max_torque, dt, g, m, l = 8.0, 2.0, 0.05, 10.0, 1.0, 1.0  # noqa: E741 (gymnasium's names)

    def __init__(self, num_agents: int, device: str = "cpu", seed: int | None = None):
        super().__init__(num_agents, device, seed)
        high = np.array([1.0, 1.0, self.max_speed], dtype=np.float32)
        self.observation_space = spaces.Box(-high, high, dtype=np.float32)
        self.action_space = spaces.Box(-self.max_torque, self.max_torque, (1,), np.float32)
        self.obs_buffer = torch.zeros(num_agents, 3, device=self.device)

    def _initial_state(self, n: int) -> torch.Tensor:
        state = self._uniform(n, -1.0, 1.0)
        return state * torch.tensor([math.pi, 1.0], device=self.device)

    def _advance(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, dict]:
        th, thdot = self.state.unbind(1)
        u = actions.reshape(-1).to(torch.float32).clamp(-self.max_torque, self.max_torque)
        angle = torch.remainder(th + math.pi, 2 * math.pi) - math.pi
        costs = angle**2 + 0.1 * thdot**2 + 0.001 * u**2
        thdot = thdot + (3 * self.g / (2 * self.l) * torch.sin(th) + 3.0 / (self.m * self.l**2) * u) * self.dt
        thdot = thdot.clamp(-self.max_speed, self.max_speed)
        th = th + thdot * self.dt
        self.state = torch.stack((th, thdot), 1)
        terminated = torch.zeros(self.num_agents, dtype=torch.bool, device=self.device)
        return -costs, terminated, {"final_abs_angle": angle.abs()}

    def _obs(self) -> torch.Tensor:
        th, thdot = self.state.unbind(1)
        return torch.stack((torch.cos(th), torch.sin(th), thdot), 1)
