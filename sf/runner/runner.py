"""The runner component: turns what the others report into progress, outputs and the decision to stop.

It is the same class in both placements; `runner_serial` and `runner_parallel` only differ in where the other
components live and how they are told to stop. The work is done by plain pieces the runner wires to its messages
and timers:

- `run_stats`: frames, versions, episodes and frame rates (`Progress`), the learner's statistics between two
  TensorBoard writes (`TrainWindow`), trajectory ages and policy lags (`StalenessTally`);
- `run_outputs`: every component's tree for profile.json and profile_series.jsonl (`ProfileRecords`) and as
  TensorBoard scalars (`TimingScalars`);
- `run_control`: the periods of the timers (`Schedule`) and why the run stops (`StopRequest`);
- `observers`: a user's `AlgoObserver`s and episode handlers (Sample Factory's hooks), called in `observers/<hook>`;
- `policy_control`: what a layer above steers the learners with (`control`: hyperparameters, weight copies and
  reward shaping per policy; population-based training, `sf.pbt`, is an observer that uses it).

For those hooks the runner also offers the attributes Sample Factory's runner has: `cfg`, `env_info`, `env_steps`,
`policy_avg_stats`, `writers` and `total_env_steps_since_resume`, and `summary_sections`, where an observer adds a
section of summary.json.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable
from typing import Any

from sf.cfg.arguments import cfg_to_dict
from sf.experiment.folder import Experiment
from sf.profiling import resources, staleness, tb_layout, timeline
from sf.profiling.activity import activity_level, activity_of
from sf.profiling.live_feed import LIVE_INTERVAL_S
from sf.profiling.series import SERIES_FILE
from sf.runner.control import Schedule, StopRequest
from sf.runner.live_status import LiveStatus
from sf.runner.observers import AlgoObserver, EpisodicHandler, ObserverCalls, Registrations
from sf.runner.outputs import ProfileRecords, TimingScalars
from sf.runner.policy_control import PolicyControl
from sf.runner.stats import Progress, StalenessTally, TrainWindow
from sf.runner.tb_tags import episode_scalars, runner_scalars, train_scalars
from sf.runtime.event_loop import Component, StopLoop
from sf.runtime.messages import (
    ComponentError,
    Episodes,
    FinalProfile,
    LearnerStats,
    NodeRestarted,
    NodeStats,
    ProfileSnapshot,
    Save,
    SaveBest,
    Staleness,
    TrainingInfo,
    WeightsAdopted,
    WeightsSaved,
)
from sf.utils.errors import traceback_line
from sf.utils.roles import RUNNER, Role, learner_name, rollout_worker_name

log = logging.getLogger("sf")


class Runner(Component):
    role = Role.RUNNER
    wait_key = "wait_messages"
    timing_base = "main_loop"  # the placements run the whole loop inside the runner's `main_loop` scope

    def __init__(
        self,
        cfg,
        experiment: Experiment,
        on_stop_request=None,
        registrations: Registrations | None = None,
        env_info=None,
    ):
        super().__init__(RUNNER)
        self.cfg = cfg
        self.env_info = env_info  # the probed env (`sf.envs.spaces.EnvInfo`), as Sample Factory's runner has it
        self.experiment = experiment
        self.on_stop_request = on_stop_request
        self.start_time = time.monotonic()
        self.started_wall = time.time()
        self.schedule = Schedule.from_cfg(cfg)
        self.progress = Progress(
            cfg.num_policies, cfg.stats_avg, self.start_time, cfg.train_for_env_steps, cfg.train_for_seconds
        )
        self.train_window = TrainWindow(cfg.num_policies)
        self.staleness = StalenessTally(cfg.num_policies)
        self.records = ProfileRecords(experiment.dir / SERIES_FILE)
        self.timing_scalars = TimingScalars()
        self.stop = StopRequest()
        self.timeline: timeline.Recorder | None = None  # set by the placement with --profiling_timeline
        self.node_restarts = 0
        self.frames_lost = 0
        self.live = LiveStatus(experiment.dir, cfg_to_dict(cfg))  # profile_live.jsonl and the progress verdict
        self.series_marks: dict[str, float] = {}  # component -> when its last snapshot went into the series
        self.shares = tb_layout.ShareScalars()
        self.observers = ObserverCalls(self.timing, registrations)
        self.iterations = {p: 0 for p in range(cfg.num_policies)}  # training iterations this session, per policy
        self.unknown_best_metric = False  # said once: no episode reports --save_best_metric
        self.healer = None  # what restarts failed components (`sf.supervision.healer`), set by the placement
        self.control = PolicyControl(self.send)
        self.summary_sections: dict[str, Callable[[], Any]] = {}  # summary.json key -> what fills it at the end

    # Sample Factory's runner attributes, for observers -------------------------------------------------
    @property
    def env_steps(self) -> dict[int, int]:
        """Env frames trained on per policy (a resumed checkpoint's included)."""
        return self.progress.env_steps

    @property
    def policy_avg_stats(self) -> dict:
        """Statistic -> per policy, a deque of its values in the last --stats_avg episodes."""
        return self.progress.policy_avg_stats

    @property
    def writers(self) -> dict:
        """Policy -> its tensorboardX SummaryWriter."""
        return {p: self.experiment.writer(p) for p in range(self.cfg.num_policies)}

    @property
    def total_env_steps_since_resume(self) -> int:
        return sum(self.progress.session_frames().values())

    def register_observer(self, observer: AlgoObserver) -> None:
        self.observers.observers.append(observer)

    def register_episodic_stats_handler(self, handler: EpisodicHandler) -> None:
        self.observers.episodic_handlers.append(handler)

    def init_observers(self) -> None:
        """`on_init` and `on_connect_components`: the placements call this before any component starts."""
        self.observers.call("on_init", self)
        self.observers.call("on_connect_components", self)

    @property
    def nodes(self) -> dict[str, dict]:
        """component -> {host, ray_node_id}, with --backend=ray: recorded into each component's profile entry."""
        return self.records.nodes

    def on_start(self) -> None:
        every, schedule = self.loop.every, self.schedule
        self.experiment.writer(0).add_custom_scalars(tb_layout.layout())
        every(schedule.report_s, self.report, owner=self)
        if schedule.save_s is not None:
            every(schedule.save_s, self._request_save, owner=self)
        if schedule.save_best_s is not None:
            every(schedule.save_best_s, self._request_save_best, owner=self)
        every(schedule.time_limit_check_s, self._check_time_limit, owner=self)
        every(schedule.train_scalars_s, self._write_train_scalars, owner=self)
        every(schedule.timing_s, self._own_timing, owner=self)
        self.observers.call("on_start", self)

    # incoming ----------------------------------------------------------------------------------------
    def _on_learner_stats(self, msg: LearnerStats) -> None:
        if msg.policy_id not in self.progress.learners_ready:  # its first word: the model is built, training can begin
            log.info("%s ready at policy version %d", learner_name(msg.policy_id), msg.version)
        with self.timing.add_time("learner_stats"):
            self.progress.on_learner_stats(msg.policy_id, msg.env_steps, msg.version, msg.stats, time.monotonic())
            if msg.stats:
                self.train_window.add(msg.policy_id, msg.stats)
                self.iterations[msg.policy_id] += 1
        if msg.stats:  # the observers' time is their own: outside learner_stats
            self.observers.call("on_training_step", self, self.iterations[msg.policy_id])
        if self.progress.trained_for(self.cfg.train_for_env_steps):
            self.request_stop("ok")

    def _on_staleness(self, msg: Staleness) -> None:
        self.staleness.add(msg.policy_id, msg.ages, msg.lags)

    def _on_episodes(self, msg: Episodes) -> None:
        self.progress.on_episodes(msg.policy_id, msg.episodes)
        self.observers.episodes(self, msg.policy_id, msg.episodes)

    def _on_weights_saved(self, msg: WeightsSaved) -> None:
        self.control.on_saved(msg)

    def _on_weights_adopted(self, msg: WeightsAdopted) -> None:
        self.control.on_adopted(msg)

    def _on_node_stats(self, msg: NodeStats) -> None:
        self.records.set_transfer(msg.agent, msg.stats)

    def _on_final_profile(self, msg: FinalProfile) -> None:
        self.on_profile(msg.component, msg.pid, msg.tree, msg.resources, msg.activity)

    def on_profile(
        self,
        name: str,
        pid: int,
        tree: dict,
        res: dict | None = None,
        activity: dict | None = None,
        final: bool = True,
        series: bool = True,
    ) -> None:
        """A component's Timing tree, its process's resources and its work/wait split (final or a snapshot): kept,
        sent to the live feed and, with `series` or when final, appended to profile_series.jsonl."""
        t = time.monotonic() - self.start_time
        frames = sum(self.progress.session_frames().values())
        record = self.records.record(name, pid, tree, res, activity, final, t, frames, series or final)
        self.live.snapshot(record)

    def _on_snapshot(self, msg: ProfileSnapshot) -> None:
        """A periodic snapshot: keep it for the exit report and the live feed; every --experiment_summaries_interval
        also in the series, with its top-level keys, shares and CPU % in TensorBoard."""
        name, tree, res, activity = msg.component, msg.tree, msg.resources, msg.activity
        with self.timing.add_time("timing_scalars"):
            now = time.monotonic()
            since = now - self.series_marks.get(name, -1e9)
            due = since >= self.cfg.experiment_summaries_interval - LIVE_INTERVAL_S / 2
            self.on_profile(name, msg.pid, tree, res, activity, final=False, series=due)
            if due:
                self.series_marks[name] = now
                level = activity_level(tree)
                self._write_timing(name, level, res)
                lifetime = (activity or {}).get("lifetime_s")
                frames = self.progress.total_frames()
                self.experiment.write_scalars(0, frames, self.shares.scalars(name, level, lifetime))

    def _on_node_restarted(self, msg: NodeRestarted) -> None:
        self.node_restarts += 1
        self.frames_lost += msg.frames_lost
        log.warning(
            "%s on node %s is started again (%d restart(s) left): %s; %d frames lost",
            msg.agent,
            msg.node,
            msg.restarts_left,
            msg.cause,
            msg.frames_lost,
        )

    def _on_error(self, msg: ComponentError) -> None:
        if self.healer is not None and not self.stop.status and self.healer.takes_error(msg.component, msg.traceback):
            return  # its process exits next, and is started again
        log.error("%s failed:\n%s", msg.component, msg.traceback)
        self.request_stop("error", f"{msg.component}: {traceback_line(msg.traceback)}")

    # control -----------------------------------------------------------------------------------------
    def request_stop(self, status: str, error: str | None = None) -> None:
        self.stop.ask(status, error)
        if self.on_stop_request is not None:
            self.on_stop_request()
        else:
            raise StopLoop

    def _check_time_limit(self) -> None:
        if time.monotonic() - self.start_time >= self.cfg.train_for_seconds:
            self.request_stop("ok")

    def _request_save(self) -> None:
        for p in range(self.cfg.num_policies):
            self.send(learner_name(p), Save())

    def _request_save_best(self) -> None:
        """Offer each learner its policy's average --save_best_metric, once it has trained --save_best_after frames."""
        metric = self.cfg.save_best_metric
        for p in range(self.cfg.num_policies):
            if self.progress.env_steps[p] < self.cfg.save_best_after or not self.progress.has_episodes(p):
                continue
            value = self.progress.avg_stat(metric, p)
            if value is not None:
                self.send(learner_name(p), SaveBest(metric, value))
            elif not self.unknown_best_metric:
                self.unknown_best_metric = True
                log.warning(
                    "--save_best_metric=%s: no episode reports it, so no best policy is kept; the episodes report: %s",
                    metric,
                    ", ".join(self.progress.policy_avg_stats),
                )

    # TensorBoard -------------------------------------------------------------------------------------
    def _write_train_scalars(self) -> None:
        """The learner's statistics as TensorBoard scalars: their mean over the iterations since the last write.
        A fast learner reports dozens of iterations a second; writing each one took more of the runner's time than
        the rest of its tree together."""
        with self.timing.add_time("train_scalars"):
            for policy_id, means in self.train_window.take_means().items():
                self.experiment.write_scalars(policy_id, self.progress.env_steps[policy_id], train_scalars(means))

    def _own_timing(self) -> None:
        with self.timing.add_time("timing_scalars"):
            self.loop.measure()
            level = activity_level(self.timing.to_dict(), self.timing_base)
            self._write_timing(RUNNER, level, resources.snapshot().to_dict())

    def _write_timing(self, name: str, level: dict, res: dict | None) -> None:
        scalars = self.timing_scalars.scalars(name, level, res)
        self.experiment.write_scalars(0, self.progress.total_frames(), scalars)

    # reporting ---------------------------------------------------------------------------------------
    def report(self) -> None:
        """The progress line and the episode scalars; the rollout workers hear how far each policy has trained (for
        envs with Sample Factory's TrainingInfoInterface)."""
        with self.timing.add_time("report"):
            self._report()
            info = TrainingInfo(dict(self.progress.env_steps), dict(self.control.reward_shaping))
            for w in range(self.cfg.num_workers):
                self.send(rollout_worker_name(w), info)

    def _report(self) -> None:
        progress, now = self.progress, time.monotonic()
        fps = progress.sample_fps(now)
        recent = {p: self.staleness.take_recent(p) for p in progress.env_steps}
        bound = self.live.progress(self._progress_record(now, fps, recent))
        log.info("%s%s", progress.progress_line(fps, now), bound)
        for p in progress.env_steps:
            scalars = {"perf/fps": fps[0], "perf/fps_60s": fps[1], **episode_scalars(progress, p)}
            ages, lags = recent[p]
            if ages:
                scalars["perf/trajectory_age_p50_s"] = staleness.age_quantile(ages, 0.5)
                scalars["perf/trajectory_age_p95_s"] = staleness.age_quantile(ages, 0.95)
            if lags:
                self.experiment.write_histogram(p, progress.env_steps[p], "perf/policy_lag", lags)
            if p == 0:
                scalars.update(runner_scalars(fps[0]))
            if p == 0 and self.healer is not None:
                scalars["perf/component_restarts"] = len(self.healer.done)
            self.experiment.write_scalars(p, progress.env_steps[p], scalars)
            if not self.observers.stopped:
                self.observers.call("extra_summaries", self, p, self.experiment.writer(p), progress.env_steps[p])
        self.experiment.flush_scalars()

    def _progress_record(self, now: float, fps: list[float], recent: dict[int, tuple[dict, dict]]) -> dict:
        """What the progress line says, as numbers for the live feed (policy 0's lag; ages over every policy)."""
        ages: dict[int, int] = {}
        for policy_ages, _ in recent.values():
            staleness.add_counts(ages, policy_ages)
        stats = self.progress.last_stats.get(0) or {}
        lag = stats.get("policy_lag")
        return {
            "t": now - self.start_time,
            "frames": sum(self.progress.session_frames().values()),
            "fps_10s": fps[0] if fps[0] == fps[0] else None,
            "fps_60s": fps[1] if fps[1] == fps[1] else None,
            "policy_lag": lag if lag is not None and lag == lag else None,
            "policy_lag_max": stats.get("policy_lag_max"),
            "trajectory_age_p50_s": staleness.age_quantile(ages, 0.5),
            "trajectory_age_p95_s": staleness.age_quantile(ages, 0.95),
            **self._policies_record(),
        }

    def _policies_record(self) -> dict:
        """Each policy's frames, objective and lag, for the live view of a run of several policies."""
        if self.cfg.num_policies < 2:
            return {}
        objective = self.cfg.pbt_target_objective if self.cfg.with_pbt else "true_objective"
        policies = {}
        for p, frames in self.progress.env_steps.items():
            lag = (self.progress.last_stats.get(p) or {}).get("policy_lag")
            value = self.progress.avg_stat(objective, p)
            policies[str(p)] = {
                "frames": frames,
                "objective": value,
                "lag": lag if lag is not None and lag == lag else None,
            }
        return {"objective": objective, "policies": policies}

    def summary(self) -> dict:
        return {
            **self.progress.summary(time.monotonic()),
            **self.staleness.summary(),
            "precision": getattr(self.cfg, "precision_in_use", None),  # what the image encoder ran in, and why
            **(self.healer.summary() if self.healer is not None else {}),
            **(
                {"node_restarts": self.node_restarts, "frames_lost": self.frames_lost}
                if self.cfg.backend == "ray"
                else {}
            ),
            **{name: section() for name, section in self.summary_sections.items()},
            "status": self.stop.status or "error",
            "error": self.stop.error,
        }

    def _stop_observers(self) -> None:
        """`on_stop`, once the components have stopped and the last summaries went out; a hook that fails here fails
        the run, and the outputs are still written."""
        try:
            self.observers.stop(self)
        except Exception:
            log.error("an observer failed in on_stop:\n%s", traceback.format_exc())
            self.stop.status = "error"
            self.stop.error = self.stop.error or "an observer failed in on_stop"

    def _write_output(self, name: str, data) -> None:
        """A full disk that ended the run (or came after) fails these writes too: said in a line, the run's own end and
        error stand."""
        try:
            self.experiment.write_json(name, data)
        except OSError as exc:
            log.error("cannot write %s: %s", self.experiment.dir / name, exc)

    def finish(self) -> dict:
        """Print every profile tree in contract order under its resources header, then the Collected line;
        write profile and summary."""
        self._write_train_scalars()
        self._report()  # its summaries reach the observers' `extra_summaries` before their `on_stop`
        self._stop_observers()  # timed beside `main_loop`, which must end with the loop (the breakdown's window)
        tree = self.timing.to_dict()
        lifetime = tree["main_loop"]["time"] if "main_loop" in tree else 0.0
        self.on_profile(
            RUNNER,
            self.experiment.pid,
            tree,
            resources.snapshot().to_dict(),
            activity_of(tree, lifetime, self.timing_base).to_dict(),
        )
        for block in self.records.trees_text():
            log.info("%s", block)
        summary = self.summary()
        self._write_output("profile.json", self.records.profiles)
        if self.timeline is not None:
            path = timeline.merge(self.cfg.profiling.output_dir, self.timeline, since=self.started_wall)
            log.info("timeline of every process: %s", path)
        self._write_output("summary.json", summary)
        self.experiment.close()
        log.info("%s", self.progress.finished_line(summary["status"], self.experiment.dir, summary["wall_time_s"]))
        log.info("Collected %s, FPS: %.1f", dict(self.progress.env_steps), summary["fps"])
        return summary
