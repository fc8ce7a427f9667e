"""The runner component: counts frames, reports progress and FPS, writes TensorBoard scalars, asks for
checkpoints, decides when to stop, and at the end prints every profile tree and writes summary.json.

It is the same class in both placements; `runner_serial` and `runner_parallel` only differ in where
the other components live and how they are told to stop.
"""

from __future__ import annotations

import logging
import time
from collections import deque

from sf.cfg.arguments import cfg_to_dict
from sf.profiling import resources, staleness, tb_layout, timeline
from sf.profiling.activity import activity_level, activity_of
from sf.profiling.live_feed import LIVE_INTERVAL_S
from sf.profiling.live_status import LiveStatus
from sf.profiling.series import SERIES_FILE, append_snapshot, snapshot_record
from sf.runtime.event_loop import Component, StopLoop
from sf.runtime.experiment import Experiment
from sf.runtime.names import RUNNER, learner_name, profile_order
from sf.utils.timing import Timing

log = logging.getLogger("sf")

REPORT_EVERY_S = 5.0
TRAIN_SCALARS_EVERY_S = 1.0  # learner statistics reach TensorBoard as means over this interval
FPS_WINDOWS = {  # summary.json says which frame rate is which (the report adds its own steady window)
    "fps": "frames of this session / wall time, start-up included (the Collected line)",
    "fps_steady": "frames / seconds from the first trained batch to the end",
}


class Runner(Component):
    wait_key = "wait_messages"
    timing_base = "main_loop"  # the placements run the whole loop inside the runner's `main_loop` scope

    def __init__(self, cfg, experiment: Experiment, on_stop_request=None):
        super().__init__(RUNNER)
        self.cfg = cfg
        self.experiment = experiment
        self.on_stop_request = on_stop_request
        n = cfg.num_policies
        self.env_steps = {p: 0 for p in range(n)}
        self.start_steps: dict[int, int] | None = None
        self.versions = {p: 0 for p in range(n)}
        self.episodes = {p: deque(maxlen=cfg.stats_avg) for p in range(n)}
        self.num_episodes = {p: 0 for p in range(n)}
        self.last_stats: dict[int, dict] = {p: {} for p in range(n)}
        # learner statistics since they were last written: key -> [sum, iterations that reported it] (a skipped
        # batch reports no losses, so each key keeps its own count)
        self.train_window: dict[int, dict[str, list[float]]] = {p: {} for p in range(n)}
        self.max_lag = {p: 0.0 for p in range(n)}
        self.learners_ready: set[int] = set()
        self.fps_window: deque[tuple[float, int]] = deque()
        self.start_time = time.monotonic()
        self.steady_start: tuple[float, int] | None = None
        self.stop_status: str | None = None
        self.error: str | None = None
        self.profiles: dict[str, dict] = {}
        self.timeline: timeline.Recorder | None = None  # set by the placement with --profiling_timeline
        self.cpu_marks: dict[str, tuple[float, float]] = {}  # component -> (wall_s, cpu_s) at its last snapshot
        self.ages = {p: {} for p in range(n)}  # trajectory age bin -> steps, over the whole run
        self.lags = {p: {} for p in range(n)}  # policy lag -> steps
        self.recent_ages = {p: {} for p in range(n)}  # the same since the last report
        self.recent_lags = {p: {} for p in range(n)}
        self.nodes: dict[str, dict] = {}  # component -> {host, ray_node_id}, with --backend=ray
        self.node_stats: dict[str, dict] = {}  # node agent -> what it sent and received
        self.node_restarts = 0
        self.frames_lost = 0
        self.live = LiveStatus(experiment.dir, cfg_to_dict(cfg))  # profile_live.jsonl and the progress verdict
        self.series_marks: dict[str, float] = {}  # component -> when its last snapshot went into the series
        self.shares = tb_layout.ShareScalars()
        self.handlers = {
            "learner_stats": self._on_learner_stats,
            "staleness": self._on_staleness,
            "episodes": self._on_episodes,
            "timing": self._on_timing,
            "profile": self.on_profile,
            "error": self._on_error,
            "node_stats": self._on_node_stats,
            "node_restarted": self._on_node_restarted,
        }

    def on_start(self) -> None:
        self.fps_window.append((self.start_time, 0))
        self.experiment.writer(0).add_custom_scalars(tb_layout.layout())
        self.loop.every(REPORT_EVERY_S, self.report, owner=self)
        if not (self.cfg.benchmark or self.cfg.sampling_only):
            self.loop.every(self.cfg.save_every_sec, self._request_save, owner=self)
            self.loop.every(self.cfg.save_best_every_sec, self._request_save_best, owner=self)
        self.loop.every(1.0, self._check_time_limit, owner=self)
        self.loop.every(TRAIN_SCALARS_EVERY_S, self._write_train_scalars, owner=self)
        self.loop.every(self.cfg.experiment_summaries_interval, self._own_timing, owner=self)

    # incoming ----------------------------------------------------------------------------------------
    def _on_learner_stats(self, policy_id: int, env_steps: int, version: int, stats: dict) -> None:
        with self.timing.add_time("learner_stats"):
            self._learner_stats(policy_id, env_steps, version, stats)

    def _learner_stats(self, policy_id: int, env_steps: int, version: int, stats: dict) -> None:
        self.env_steps[policy_id] = env_steps
        self.versions[policy_id] = version
        if stats:
            self.last_stats[policy_id] = stats
            self.max_lag[policy_id] = max(self.max_lag[policy_id], stats["policy_lag_max"])
            if self.steady_start is None:
                self.steady_start = (time.monotonic(), self.total_frames())
            window = self.train_window[policy_id]
            for key, value in stats.items():
                total = window.setdefault(key, [0.0, 0])
                total[0] += value
                total[1] += 1
        self.learners_ready.add(policy_id)
        if len(self.learners_ready) == self.cfg.num_policies and self.start_steps is None:
            self.start_steps = dict(self.env_steps)
        if all(s >= self.cfg.train_for_env_steps for s in self.env_steps.values()):
            self.request_stop("ok")

    def _write_train_scalars(self) -> None:
        """The learner's statistics as TensorBoard scalars: their mean over the iterations since the last write.
        A fast learner reports dozens of iterations a second; writing each one took more of the runner's time than
        the rest of its tree together."""
        with self.timing.add_time("train_scalars"):
            for policy_id, window in self.train_window.items():
                if window:
                    self.experiment.write_scalars(
                        policy_id,
                        self.env_steps[policy_id],
                        {f"train/{k}": total / n for k, (total, n) in window.items()},
                    )
                    self.train_window[policy_id] = {}

    def _on_staleness(self, policy_id: int, ages: dict[int, int], lags: dict[int, int]) -> None:
        for total, more in ((self.ages, ages), (self.recent_ages, ages), (self.lags, lags), (self.recent_lags, lags)):
            staleness.add_counts(total[policy_id], more)

    def _on_episodes(self, policy_id: int, episodes: list[tuple[float, int]]) -> None:
        self.episodes[policy_id].extend(episodes)
        self.num_episodes[policy_id] += len(episodes)

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
        """A component's Timing tree, its process's resources and its work/wait split (final or a snapshot).

        Each one goes to the live feed; with `series`, also to `profile_series.jsonl` with the time and frame count it
        arrived at, so a report can take a steady-state window and `--compare` can tell a change from noise.
        """
        entry = {"name": name, "pid": pid, "tree": tree}
        if name in self.nodes:
            entry["node"] = self.nodes[name]
        if name in self.node_stats:
            entry["transfer"] = self.node_stats[name]
        if res is not None:
            entry["resources"] = res
        if activity is not None:
            entry["activity"] = activity
        self.profiles[name] = entry
        record = snapshot_record(time.monotonic() - self.start_time, sum(self.session_frames().values()), entry, final)
        self.live.snapshot(record)
        if series or final:
            append_snapshot(self.experiment.dir / SERIES_FILE, record)

    def _on_timing(
        self, name: str, pid: int, tree: dict, res: dict | None = None, activity: dict | None = None
    ) -> None:
        """A periodic snapshot: keep it for the exit report and the live feed; every --experiment_summaries_interval
        also in the series, with its top-level keys, shares and CPU % in TensorBoard."""
        with self.timing.add_time("timing_scalars"):
            now = time.monotonic()
            due = (
                now - self.series_marks.get(name, -1e9) >= self.cfg.experiment_summaries_interval - LIVE_INTERVAL_S / 2
            )
            self.on_profile(name, pid, tree, res, activity, final=False, series=due)
            if due:
                self.series_marks[name] = now
                level = activity_level(tree)
                self._write_timing(name, level, res)
                lifetime = (activity or {}).get("lifetime_s")
                self.experiment.write_scalars(0, self.total_frames(), self.shares.scalars(name, level, lifetime))

    def _own_timing(self) -> None:
        with self.timing.add_time("timing_scalars"):
            self.loop.measure()
            self._write_timing(
                RUNNER, activity_level(self.timing.to_dict(), self.timing_base), resources.snapshot().to_dict()
            )

    def _write_timing(self, name: str, level: dict, res: dict | None) -> None:
        """`timing/<component>/<key>`: cumulative seconds of each top-level key; `cpu_percent` since the last one.
        TensorBoard allows no spaces in tags: "Learner 0" is written "Learner_0"."""
        tag = name.replace(" ", "_")
        scalars = {f"timing/{tag}/{key}": entry["time"] for key, entry in level.items()}
        if res is not None:
            wall, cpu = res["wall_s"], res["cpu_user_s"] + res["cpu_system_s"]
            last_wall, last_cpu = self.cpu_marks.get(name, (0.0, 0.0))
            if wall > last_wall:
                scalars[f"timing/{tag}/cpu_percent"] = 100.0 * (cpu - last_cpu) / (wall - last_wall)
            self.cpu_marks[name] = (wall, cpu)
        self.experiment.write_scalars(0, self.total_frames(), scalars)

    def _on_node_stats(self, name: str, stats: dict) -> None:
        self.node_stats[name] = stats
        if name in self.profiles:
            self.profiles[name]["transfer"] = stats

    def _on_node_restarted(self, name: str, node: str, cause: str, frames_lost: int, restarts_left: int) -> None:
        self.node_restarts += 1
        self.frames_lost += frames_lost
        log.warning(
            "%s on node %s is started again (%d restart(s) left): %s; %d frames lost",
            name,
            node,
            restarts_left,
            cause,
            frames_lost,
        )

    def _on_error(self, name: str, message: str) -> None:
        log.error("%s failed:\n%s", name, message)
        self.request_stop("error", f"{name}: {message.strip().splitlines()[-1]}")

    # control -----------------------------------------------------------------------------------------
    def request_stop(self, status: str, error: str | None = None) -> None:
        if self.stop_status is None or (status == "error" and self.stop_status != "error"):
            self.stop_status, self.error = status, error
        if self.on_stop_request is not None:
            self.on_stop_request()
        else:
            raise StopLoop

    def _check_time_limit(self) -> None:
        if time.monotonic() - self.start_time >= self.cfg.train_for_seconds:
            self.request_stop("ok")

    def _request_save(self) -> None:
        for p in range(self.cfg.num_policies):
            self.send(learner_name(p), "save")

    def _request_save_best(self) -> None:
        """Offer each learner its policy's average --save_best_metric, once it has trained --save_best_after frames."""
        for p in range(self.cfg.num_policies):
            if self.env_steps[p] >= self.cfg.save_best_after and self.episodes[p]:
                self.send(learner_name(p), "save_best", self.cfg.save_best_metric, self.avg_reward(p))

    # reporting ---------------------------------------------------------------------------------------
    def total_frames(self) -> int:
        return sum(self.env_steps.values())

    def session_frames(self) -> dict[int, int]:
        start = self.start_steps or {p: 0 for p in self.env_steps}
        return {p: s - start.get(p, 0) for p, s in self.env_steps.items()}

    def fps_over(self, seconds: float, now: float, frames: int) -> float:
        past = [(t, f) for t, f in self.fps_window if now - t <= seconds]
        if not past or now - past[0][0] < 1e-6:
            return float("nan")
        return (frames - past[0][1]) / (now - past[0][0])

    def avg_reward(self, policy_id: int) -> float:
        episodes = self.episodes[policy_id]
        return sum(r for r, _ in episodes) / len(episodes) if episodes else float("nan")

    def report(self) -> None:
        with self.timing.add_time("report"):
            self._report()

    def _report(self) -> None:
        now, frames = time.monotonic(), sum(self.session_frames().values())
        self.fps_window.append((now, frames))
        while self.fps_window and now - self.fps_window[0][0] > 300:
            self.fps_window.popleft()
        fps = [self.fps_over(s, now, frames) for s in (10, 60, 300)]
        lag = [self.last_stats[p].get("policy_lag", float("nan")) for p in self.env_steps]
        rewards = {p: round(self.avg_reward(p), 3) for p in self.env_steps}
        bound = self.live.progress(self._progress_record(now, frames, fps, lag))
        log.info(
            "Fps is (10 sec: %.1f, 60 sec: %.1f, 300 sec: %.1f). Total num frames: %d. Avg episode reward: %s. "
            "Policy lag: %s%s",
            *fps,
            self.total_frames(),
            rewards,
            [round(x, 2) for x in lag],
            bound,
        )
        for p in self.env_steps:
            scalars = {"perf/fps": fps[0], "perf/fps_60s": fps[1], "reward/avg_episode_reward": rewards[p]}
            if self.episodes[p]:
                scalars["len/avg_episode_length"] = sum(n for _, n in self.episodes[p]) / len(self.episodes[p])
            if self.recent_ages[p]:
                scalars["perf/trajectory_age_p50_s"] = staleness.age_quantile(self.recent_ages[p], 0.5)
                scalars["perf/trajectory_age_p95_s"] = staleness.age_quantile(self.recent_ages[p], 0.95)
            if self.recent_lags[p]:
                self.experiment.write_histogram(p, self.env_steps[p], "perf/policy_lag", self.recent_lags[p])
            self.recent_ages[p], self.recent_lags[p] = {}, {}
            self.experiment.write_scalars(p, self.env_steps[p], scalars)
        self.experiment.flush_scalars()

    def _progress_record(self, now: float, frames: int, fps: list[float], lag: list[float]) -> dict:
        """What the progress line says, as numbers for the live feed (policy 0's lag; ages over every policy)."""
        ages: dict[int, int] = {}
        for p in self.env_steps:
            staleness.add_counts(ages, self.recent_ages[p])
        return {
            "t": now - self.start_time,
            "frames": frames,
            "fps_10s": fps[0] if fps[0] == fps[0] else None,
            "fps_60s": fps[1] if fps[1] == fps[1] else None,
            "policy_lag": lag[0] if lag and lag[0] == lag[0] else None,
            "policy_lag_max": self.last_stats[0].get("policy_lag_max") if self.last_stats.get(0) else None,
            "trajectory_age_p50_s": staleness.age_quantile(ages, 0.5),
            "trajectory_age_p95_s": staleness.age_quantile(ages, 0.95),
        }

    def summary(self) -> dict:
        wall = time.monotonic() - self.start_time
        frames = sum(self.session_frames().values())
        all_ages: dict[int, int] = {}
        all_lags: dict[int, int] = {}
        for p in self.env_steps:
            staleness.add_counts(all_ages, self.ages[p])
            staleness.add_counts(all_lags, self.lags[p])
        steady = float("nan")
        if self.steady_start is not None:
            t0, f0 = self.steady_start
            if time.monotonic() - t0 > 1e-3:
                steady = (self.total_frames() - f0) / (time.monotonic() - t0)
        return {
            "env_frames": dict(self.env_steps),
            "fps": frames / wall if wall > 0 else 0.0,
            "fps_steady": steady if steady == steady else None,
            "fps_windows": FPS_WINDOWS,
            "wall_time_s": wall,
            "avg_episode_reward": {
                p: (r if r == r else None) for p, r in ((p, self.avg_reward(p)) for p in self.env_steps)
            },
            "num_episodes": sum(self.num_episodes.values()),
            "num_episodes_per_policy": dict(self.num_episodes),
            "policy_versions": dict(self.versions),
            "max_policy_lag": dict(self.max_lag),
            "trajectory_age_s": {
                "p50": staleness.age_quantile(all_ages, 0.5),
                "p95": staleness.age_quantile(all_ages, 0.95),
            },
            "policy_lag_hist": staleness.lag_histogram(all_lags),
            **(
                {"node_restarts": self.node_restarts, "frames_lost": self.frames_lost}
                if self.cfg.backend == "ray"
                else {}
            ),
            "status": self.stop_status or "error",
            "error": self.error,
        }

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
        for name in sorted(self.profiles, key=profile_order):
            entry = self.profiles[name]
            if "resources" in entry:
                log.info("%s", resources.header(name, entry["resources"], entry.get("activity")))
            log.info("%s", Timing.from_dict(f"{name} profile", entry["tree"]).tree_str())
        summary = self.summary()
        self.experiment.write_json("profile.json", self.profiles)
        if self.timeline is not None:
            path = timeline.merge(self.cfg.profiling.output_dir, self.timeline)
            log.info("timeline of every process: %s", path)
        self.experiment.write_json("summary.json", summary)
        self.experiment.close()
        log.info("Collected %s, FPS: %.1f", dict(self.env_steps), summary["fps"])
        return summary
