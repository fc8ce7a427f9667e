"""Observers: a user's code called by the runner at Sample Factory's points of a run, without editing sf.

Subclass `AlgoObserver`, override the hooks you need and register an instance on the runner (`make_runner(cfg)` in
`sf.train`, then `runner.register_observer(...)`). Each hook is called in the main process, on the runner's loop,
in serial, parallel and Ray runs alike, and its time is kept in the runner's tree under `observers/<hook>`. An
exception in a hook ends the run with status "error", the hook named in the log.

`register_episodic_stats_handler(func)` is Sample Factory's other runner hook: `func(runner, msg, policy_id)` for
every finished episode, `msg` shaped as Sample Factory's (`{"episodic": {...}, "policy_id": p}`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sf.utils.timing import Timing

if TYPE_CHECKING:  # sf.train imports this module before any env package, to parse flags fast
    from sf.envs.episodes import EpisodeRecord

EPISODIC = "episodic"  # Sample Factory's message key of an episode's statistics
POLICY_ID_KEY = "policy_id"


class AlgoObserver:
    """Sample Factory's hooks, with its names and arguments; every one does nothing unless overridden."""

    def on_init(self, runner) -> None:
        """Before any component process starts (or, serially, before the loop runs)."""

    def on_connect_components(self, runner) -> None:
        """Right after `on_init`: in Sample Factory, where extra signal connections go."""

    def on_start(self, runner) -> None:
        """Once every component has started: the runner's loop is running."""

    def on_training_step(self, runner, training_iteration_since_resume: int) -> None:
        """After each training iteration of a policy: the learner's statistics for it have just arrived."""

    def extra_summaries(self, runner, policy_id: int, writer, env_steps: int) -> None:
        """When the runner writes the policy's episode scalars: `writer` is its tensorboardX SummaryWriter. The
        arguments come in the order Sample Factory 2.1.1 passes them (writer, then env_steps)."""

    def on_stop(self, runner) -> None:
        """Once, when the run stops (done, interrupted or failed), before the final checkpoints are written."""


EpisodicHandler = Callable[[Any, dict, int], None]


@dataclass
class Registrations:
    """What a user registered before the run: handed by `sf.train` to the placement, which gives it to the runner."""

    observers: list[AlgoObserver] = field(default_factory=list)
    episodic_handlers: list[EpisodicHandler] = field(default_factory=list)


class ObserverCalls:
    """The registered observers and episode handlers, called in the runner's Timing scope `observers/<hook>`."""

    def __init__(self, timing: Timing, registrations: Registrations | None = None):
        self.timing = timing
        registrations = registrations or Registrations()
        self.observers = registrations.observers
        self.episodic_handlers = registrations.episodic_handlers
        self.stopped = False

    def call(self, hook: str, runner, *args) -> None:
        if not self.observers:
            return
        with self.timing.add_time("observers"), self.timing.add_time(hook):
            for observer in self.observers:
                getattr(observer, hook)(runner, *args)

    def stop(self, runner) -> None:
        """`on_stop`, once."""
        if not self.stopped:
            self.stopped = True
            self.call("on_stop", runner)

    def episodes(self, runner, policy_id: int, episodes: list[EpisodeRecord]) -> None:
        if not self.episodic_handlers:
            return
        with self.timing.add_time("observers"), self.timing.add_time("episodic_stats_handlers"):
            for ret, length, objective, extra in episodes:
                stats = {"reward": ret, "len": length, "episode_extra_stats": extra or {}}
                stats["true_objective"] = ret if objective is None else objective
                msg = {EPISODIC: stats, POLICY_ID_KEY: policy_id}
                for handler in self.episodic_handlers:
                    handler(runner, msg, policy_id)
