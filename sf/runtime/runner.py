"""The runner component: turns what the others report into progress, outputs and the decision to stop.

It is the same class in both placements; `runner_serial` and `runner_parallel` only differ in where the other
components live and how they are told to stop. The work is done by plain pieces the runner wires to its messages
and timers:

- `run_stats`: frames, versions, episodes and frame rates (`Progress`), the learner's statistics between two
  TensorBoard writes (`TrainWindow`), trajectory ages and policy lags (`StalenessTally`);
- `run_outputs`: every component's tree for profile.json and profile_series.jsonl (`ProfileRecords`) and as
  TensorBoard scalars (`TimingScalars`);
- `run_control`: the periods of the timers (`Schedule`) and why the run stops (`StopRequest`).
"""

from __future__ import annotations

import logging
import time

from sf.cfg.arguments import cfg_to_dict
from sf.profiling import resources, staleness, tb_layout, timeline
from sf.profiling.activity import activity_level, activity_of
from sf.profiling.live_feed import LIVE_INTERVAL_S
from sf.profiling.series import SERIES_FILE
from sf.runtime.errors import last_line
from sf.runtime.event_loop import Component, StopLoop
from sf.runtime.experiment import Experiment
from sf.runtime.live_status import LiveStatus
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
)
from sf.runtime.run_control import Schedule, StopRequest
from sf.runtime.run_outputs import ProfileRecords, TimingScalars
from sf.runtime.run_stats import Progress, StalenessTally, TrainWindow
from sf.utils.roles import RUNNER, Role, learner_name

log = logging.getLogger("sf")


class Runner(Component):
    role = Role.RUNNER
    wait_key = "wait_messages"
    timing_base = "main_loop"  # the placements run the whole loop inside the runner's `main_loop` scope

    def __init__(self, cfg, experiment: Experiment, on_stop_request=None):
        super().__init__(RUNNER)
        self.cfg = cfg
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
        self.healer = None  # what restarts failed components (`sf.runtime.healer`), set by the placement

    # what the placements read and set ------------------------------------------------------------------
    @property
    def stop_status(self) -> str | None:
        return self.stop.status

    @stop_status.setter
    def stop_status(self, status: str | None) -> None:
        self.stop.status = status

    @property
    def error(self) -> str | None:
        return self.stop.error

    @error.setter
    def error(self, error: str | None) -> None:
        self.stop.error = error

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

    # incoming ----------------------------------------------------------------------------------------
    def _on_learner_stats(self, msg: LearnerStats) -> None:
        with self.timing.add_time("learner_stats"):
            self.progress.on_learner_stats(msg.policy_id, msg.env_steps, msg.version, msg.stats, time.monotonic())
            if msg.stats:
                self.train_window.add(msg.policy_id, msg.stats)
            if self.progress.trained_for(self.cfg.train_for_env_steps):
                self.request_stop("ok")

    def _on_staleness(self, msg: Staleness) -> None:
        self.staleness.add(msg.policy_id, msg.ages, msg.lags)

    def _on_episodes(self, msg: Episodes) -> None:
        self.progress.on_episodes(msg.policy_id, msg.episodes)

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
        self.request_stop("error", f"{msg.component}: {last_line(msg.traceback)}")

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
        for p in range(self.cfg.num_policies):
            if self.progress.env_steps[p] >= self.cfg.save_best_after and self.progress.episodes[p]:
                self.send(learner_name(p), SaveBest(self.cfg.save_best_metric, self.progress.avg_reward(p)))

    # TensorBoard -------------------------------------------------------------------------------------
    def _write_train_scalars(self) -> None:
        """The learner's statistics as TensorBoard scalars: their mean over the iterations since the last write.
        A fast learner reports dozens of iterations a second; writing each one took more of the runner's time than
        the rest of its tree together."""
        with self.timing.add_time("train_scalars"):
            for policy_id, means in self.train_window.take_means().items():
                scalars = {f"train/{k}": v for k, v in means.items()}
                self.experiment.write_scalars(policy_id, self.progress.env_steps[policy_id], scalars)

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
        with self.timing.add_time("report"):
            self._report()

    def _report(self) -> None:
        progress, now = self.progress, time.monotonic()
        fps = progress.sample_fps(now)
        recent = {p: self.staleness.take_recent(p) for p in progress.env_steps}
        bound = self.live.progress(self._progress_record(now, fps, recent))
        log.info("%s%s", progress.progress_line(fps, now), bound)
        for p in progress.env_steps:
            reward = round(progress.avg_reward(p), 3)
            scalars = {"perf/fps": fps[0], "perf/fps_60s": fps[1], "reward/avg_episode_reward": reward}
            length = progress.avg_episode_length(p)
            if length is not None:
                scalars["len/avg_episode_length"] = length
            ages, lags = recent[p]
            if ages:
                scalars["perf/trajectory_age_p50_s"] = staleness.age_quantile(ages, 0.5)
                scalars["perf/trajectory_age_p95_s"] = staleness.age_quantile(ages, 0.95)
            if lags:
                self.experiment.write_histogram(p, progress.env_steps[p], "perf/policy_lag", lags)
            if p == 0 and self.healer is not None:
                scalars["perf/component_restarts"] = len(self.healer.done)
            self.experiment.write_scalars(p, progress.env_steps[p], scalars)
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
        }

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
            "status": self.stop.status or "error",
            "error": self.stop.error,
        }

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
        self._report()
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
