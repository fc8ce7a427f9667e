"""What one instrumentation event costs, measured on this machine at start, so the breakdown can subtract it.

Each cost is a difference of two loops' CPU time (the thread's own, so time a busy machine keeps the thread waiting
does not count), with and without the instrumentation, run back to back many times: the median of the paired
differences. A shared virtual machine changes speed by tens of percent from one second to the next; a pair sees
the same speed, where the fastest run of each kind may come from different phases and leave a difference of
nothing:

- `scope_s`: a Timing scope observed by the range hook under the profiler, minus a plain Timing scope;
- `sim_s`: a call through the simulator-range wrapper, minus the plain call;
- `op_s`: a recorded torch operator, from a training-like mix (`TrainingMix`: a small actor-critic's batched
  inference, then its forward, losses, backward, gradient clipping and Adam step): the mix's time under the profiler
  minus without it, over the operators the profiler recorded. A tight loop of one small operator keeps the
  profiler's bookkeeping in cache and charges a third of what an operator costs amid a training step's mix of
  forward, autograd and optimizer operators;
- `op_inside_s`: the part of `op_s` that falls between an op's own recorded start and end, measured as the
  recorded length of an operator that does nothing (`resolve_conj` of a real tensor). An op nested in another
  puts its whole `op_s` inside its parent; an outermost op puts `op_inside_s` in the backend and the rest in Python.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass

import torch
from torch import nn

from sf.breakdown.capture import ScopeRanges, in_sim_range, profiler_activities
from sf.utils.timing import Timing


@dataclass(frozen=True)
class EventCosts:
    scope_s: float
    sim_s: float
    op_s: float
    op_inside_s: float
    python_scale: float = 1.0  # the Python side of Python-called events in the training (`sf.breakdown.in_situ`)

    def to_dict(self) -> dict:
        return asdict(self)


class TrainingMix:
    """One step of a small actor-critic's work, the operator mix a short RL training on a vector env records:
    a no-grad forward and action sampling for a few envs, then a PPO-style loss on a minibatch, backward, gradient
    clipping and an Adam step. The sizes are CartPole-like; the per-operator cost depends on the kinds of operators
    (autograd bookkeeping, optimizer loops), far less on the tensor sizes."""

    def __init__(self, obs: int = 8, hidden: int = 64, actions: int = 4, envs: int = 16, batch: int = 256):
        generator = torch.Generator().manual_seed(0)
        with torch.random.fork_rng():  # the same weights every time, and the caller's random stream untouched
            torch.manual_seed(0)
            self.encoder = nn.Sequential(nn.Linear(obs, hidden), nn.ELU(), nn.Linear(hidden, hidden), nn.ELU())
            self.policy, self.value = nn.Linear(hidden, actions), nn.Linear(hidden, 1)
        self.params = [*self.encoder.parameters(), *self.policy.parameters(), *self.value.parameters()]
        self.optimizer = torch.optim.Adam(self.params, lr=1e-4, eps=1e-6)
        self.env_obs = torch.randn(envs, obs, generator=generator)
        self.obs = torch.randn(batch, obs, generator=generator)
        self.actions = torch.randint(actions, (batch,), generator=generator)
        self.advantages = torch.randn(batch, generator=generator)
        self.old_log_probs = torch.full((batch,), -1.0)

    def step(self) -> None:
        with torch.no_grad():
            probs = torch.softmax(self.policy(self.encoder(self.env_obs)), dim=-1)
            torch.multinomial(probs, 1)
        hidden = self.encoder(self.obs)
        log_probs = torch.log_softmax(self.policy(hidden), dim=-1).gather(1, self.actions[:, None]).squeeze(1)
        ratio = torch.exp(log_probs - self.old_log_probs)
        surrogate = torch.min(ratio * self.advantages, ratio.clamp(0.9, 1.1) * self.advantages)
        value_error = (self.value(hidden).squeeze(1) - self.advantages).pow(2)
        loss = -surrogate.mean() + 0.5 * value_error.mean()
        self.optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(self.params, 4.0)
        self.optimizer.step()


def _loop_scopes(timing: Timing, n: int) -> float:
    start = time.thread_time()
    for _ in range(n):
        with timing.add_time("calibration"):
            pass
    return time.thread_time() - start


def _loop_calls(fn, n: int) -> float:
    start = time.thread_time()
    for _ in range(n):
        fn()
    return time.thread_time() - start


def _paired_median(with_: list[float], without: list[float]) -> float:
    return statistics.median(a - b for a, b in zip(with_, without))


def _recorded_ops(prof) -> int:
    return sum(1 for e in prof.profiler.kineto_results.events() if e.device_type() == torch.autograd.DeviceType.CPU)


def measure_op_cost(steps: int = 25, repeats: int = 15) -> float:
    """Seconds the profiler adds per recorded operator in `TrainingMix`: many short runs each way, alternating, and
    the median of the paired differences, so a burst of a neighbour's work spoils single pairs, not the result."""
    mix = TrainingMix()
    for _ in range(10):  # first calls allocate and pick kernels
        mix.step()
    plain, profiled, recorded = [], [], []
    for _ in range(repeats):
        plain.append(_loop_calls(mix.step, steps))
        with torch.profiler.profile(activities=profiler_activities()) as prof:
            profiled.append(_loop_calls(mix.step, steps))
        recorded.append(_recorded_ops(prof))
    return max(0.0, statistics.median((p - q) / r for p, q, r in zip(profiled, plain, recorded)))


def measure_event_costs(n: int = 10_000, repeats: int = 9, mix_steps: int = 25, mix_repeats: int = 15) -> EventCosts:
    """The four per-event costs of this process on this machine (a few seconds)."""
    timing = Timing("calibration")
    x = torch.ones(16)

    def nothing():
        return None

    wrapped = in_sim_range(nothing)
    ranges = ScopeRanges()
    plain: dict[str, list[float]] = {"scope": [], "sim": []}
    observed: dict[str, list[float]] = {"scope": [], "sim": []}
    inside: list[float] = []
    for _ in range(repeats):
        plain["scope"].append(_loop_scopes(timing, n))
        plain["sim"].append(_loop_calls(nothing, n))
        with ranges.installed(), torch.profiler.profile(activities=profiler_activities()) as prof:
            ranges.active = True
            observed["scope"].append(_loop_scopes(timing, n))
            ranges.active = False
            observed["sim"].append(_loop_calls(wrapped, n))
            for _ in range(n // 10):
                x.resolve_conj()
        lengths = [e.duration_ns() for e in prof.profiler.kineto_results.events() if e.name() == "aten::resolve_conj"]
        inside.append(statistics.median(lengths) / 1e9)
    scope, sim = (max(0.0, _paired_median(observed[k], plain[k]) / n) for k in ("scope", "sim"))
    op = measure_op_cost(mix_steps, mix_repeats)
    return EventCosts(scope, sim, op, min(min(inside), op))
