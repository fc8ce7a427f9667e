"""What the runner counts, apart from any output: frames and policy versions per policy, episodes, frame rates over
windows, the learner's statistics between two TensorBoard writes, and how stale the trained experience was.

Plain objects fed by the runner's message handlers, each testable without a loop, a process or a file.
"""

from __future__ import annotations

from collections import deque

from sf.envs.episodes import EpisodeRecord
from sf.profiling import staleness

BUILT_IN_STATS = ("reward", "len", "true_objective")  # every episode reports these; the envs may add their own
PROGRESS_LINE_EXTRA_KEYS = 3  # extra stats on the progress line while there are at most this many keys
NO_EXTRA: dict = {}
FPS_WINDOWS_S = (10, 60, 300)
NO_TIME_LIMIT_S = 365 * 24 * 3600.0  # a --train_for_seconds this long is none (its default is 1e10 s)
FPS_WINDOWS = {  # summary.json says which frame rate is which (the report adds its own steady window)
    "fps": "frames of this session / wall time, start-up included (the Collected line)",
    "fps_steady": "frames / seconds from the first trained batch to the end",
}


def duration(seconds: float) -> str:
    """`45 s`, `12 min`, `3.5 h`: a span as a person reads it."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class Progress:
    """Frames, versions and episodes per policy, and the frame rates the progress line and summary.json report.
    `target_frames` and `time_limit_s` (--train_for_env_steps, --train_for_seconds) give the progress line its share
    done and time left."""

    def __init__(
        self,
        num_policies: int,
        stats_avg: int,
        start_time: float,
        target_frames: int | None = None,
        time_limit_s: float | None = None,
    ):
        policies = range(num_policies)
        self.start_time = start_time
        self.target_frames = target_frames
        self.time_limit_s = time_limit_s
        self.env_steps = {p: 0 for p in policies}
        self.start_steps: dict[int, int] | None = None  # frames of a resumed checkpoint, once every learner reported
        self.versions = {p: 0 for p in policies}
        self.stats_avg = stats_avg
        # Sample Factory's name and shape: statistic -> per policy, its values in the last `stats_avg` episodes.
        # "reward", "len" and "true_objective" for every episode, and each key of the envs' episode_extra_stats
        self.policy_avg_stats: dict[str, list[deque]] = {key: self._new_stat() for key in BUILT_IN_STATS}
        self.env_objective = False  # an env gave its own true_objective (otherwise it is the return)
        self.num_episodes = {p: 0 for p in policies}
        self.last_stats: dict[int, dict] = {p: {} for p in policies}
        self.max_lag = {p: 0.0 for p in policies}
        self.learners_ready: set[int] = set()
        self.fps_window: deque[tuple[float, int]] = deque([(start_time, 0)])
        self.steady_start: tuple[float, int] | None = None  # (time, total frames) at the first trained batch

    def on_learner_stats(self, policy_id: int, env_steps: int, version: int, stats: dict, now: float) -> None:
        self.env_steps[policy_id] = env_steps
        self.versions[policy_id] = version
        if stats:
            self.last_stats[policy_id] = stats
            self.max_lag[policy_id] = max(self.max_lag[policy_id], stats["policy_lag_max"])
            if self.steady_start is None:
                self.steady_start = (now, self.total_frames())
        self.learners_ready.add(policy_id)
        if len(self.learners_ready) == len(self.env_steps) and self.start_steps is None:
            self.start_steps = dict(self.env_steps)

    def _new_stat(self) -> list[deque]:
        return [deque(maxlen=self.stats_avg) for _ in self.env_steps]

    def on_episodes(self, policy_id: int, episodes: list[EpisodeRecord]) -> None:
        stats = self.policy_avg_stats
        rewards, lengths, objectives = (stats[key][policy_id] for key in BUILT_IN_STATS)
        for ret, length, objective, extra in episodes:
            rewards.append(ret)
            lengths.append(length)
            if objective is None:
                objectives.append(ret)
            else:
                objectives.append(objective)
                self.env_objective = True
            for key, value in (extra or NO_EXTRA).items():
                if key not in stats:
                    stats[key] = self._new_stat()
                values = stats[key][policy_id]
                if isinstance(value, list):
                    if len(value) > values.maxlen:  # as Sample Factory does: no sample of one episode is dropped
                        values = stats[key][policy_id] = deque(values, maxlen=len(value))
                    values.extend(value)
                else:
                    values.append(value)
        self.num_episodes[policy_id] += len(episodes)

    def starting(self) -> list[int]:
        """The policies whose learner has not reported yet: still starting, it has trained nothing."""
        return [p for p in self.env_steps if p not in self.learners_ready]

    def has_episodes(self, policy_id: int) -> bool:
        return bool(self.policy_avg_stats["reward"][policy_id])

    def avg_stat(self, key: str, policy_id: int) -> float | None:
        """The mean of a statistic over its last values for the policy; None before any."""
        values = self.policy_avg_stats[key][policy_id] if key in self.policy_avg_stats else ()
        return sum(values) / len(values) if values else None

    def extra_keys(self) -> list[str]:
        """The envs' episode_extra_stats keys seen so far, in order of arrival."""
        return [key for key in self.policy_avg_stats if key not in BUILT_IN_STATS]

    def extra_means(self, policy_id: int) -> dict[str, float]:
        means = {key: self.avg_stat(key, policy_id) for key in self.extra_keys()}
        return {key: mean for key, mean in means.items() if mean is not None}

    def trained_for(self, env_steps: int) -> bool:
        """Every policy has trained on at least `env_steps` frames."""
        return all(s >= env_steps for s in self.env_steps.values())

    def total_frames(self) -> int:
        return sum(self.env_steps.values())

    def session_frames(self) -> dict[int, int]:
        """Frames per policy since this session started (a resumed checkpoint's frames left out)."""
        start = self.start_steps or {p: 0 for p in self.env_steps}
        return {p: s - start.get(p, 0) for p, s in self.env_steps.items()}

    def avg_reward(self, policy_id: int) -> float:
        mean = self.avg_stat("reward", policy_id)
        return float("nan") if mean is None else mean

    def avg_episode_length(self, policy_id: int) -> float | None:
        return self.avg_stat("len", policy_id)

    def fps_over(self, seconds: float, now: float, frames: int) -> float:
        past = [(t, f) for t, f in self.fps_window if now - t <= seconds]
        if not past or now - past[0][0] < 1e-6:
            return float("nan")
        return (frames - past[0][1]) / (now - past[0][0])

    def sample_fps(self, now: float) -> list[float]:
        """Record the session's frames now and return the frame rates over the last 10, 60 and 300 seconds."""
        frames = sum(self.session_frames().values())
        self.fps_window.append((now, frames))
        while self.fps_window and now - self.fps_window[0][0] > FPS_WINDOWS_S[-1]:
            self.fps_window.popleft()
        return [self.fps_over(s, now, frames) for s in FPS_WINDOWS_S]

    def progress_line(self, fps: list[float], now: float | None = None) -> str:
        """The runner's line every few seconds (docs/getting-started.md, "The progress line"): Sample Factory's
        parts, then the share of the run done and the time left."""
        lag = [round(self.last_stats[p].get("policy_lag", float("nan")), 2) for p in self.env_steps]
        line = (
            f"Fps is (10 sec: {fps[0]:.1f}, 60 sec: {fps[1]:.1f}, 300 sec: {fps[2]:.1f}). Total num frames: "
            f"{self.total_frames()}. Avg episode reward: {self.reward_text()}. {self._custom_stats_text()}"
            f"Policy lag: {lag}"
        )
        done = self.done(fps[1] if fps[1] == fps[1] and fps[1] > 0 else fps[0], now)
        return f"{line}. {done}" if done else line

    def reward_text(self) -> str:
        """Sample Factory's form, which users grep: `[(0, '1.000')]`, the policies with a finished episode."""
        return repr([(p, f"{self.avg_reward(p):.3f}") for p in self.env_steps if self.has_episodes(p)])

    def done(self, fps: float, now: float | None) -> str:
        """`Done: 81 % of 200,000 frames, about 2 s left`: the policy furthest behind against --train_for_env_steps,
        the time left at `fps` (all policies' frames per second), or to --train_for_seconds when that comes first."""
        if not self.target_frames:
            return ""
        furthest_behind = min(self.env_steps.values())
        share = min(1.0, furthest_behind / self.target_frames)
        text = f"Done: {share:.0%} of {self.target_frames:,} frames".replace("%", " %")
        if furthest_behind >= self.target_frames:
            return text
        left = None
        if fps == fps and fps > 0:
            left = max(0, self.target_frames - furthest_behind) * len(self.env_steps) / fps
        limit = ""
        if now is not None and self.time_limit_s is not None and self.time_limit_s < NO_TIME_LIMIT_S:
            to_limit = max(0.0, self.time_limit_s - (now - self.start_time))
            if left is None or to_limit < left:
                left, limit = to_limit, " (--train_for_seconds)"
        return f"{text}, about {duration(left)} left{limit}" if left is not None else text

    def finished_line(self, status: str, folder, wall_s: float) -> str:
        """The run's last word before the Collected line: how it ended, its frames, time and reward, its folder."""
        counted = max(len(rewards) for rewards in self.policy_avg_stats["reward"])
        if counted:
            rewards = {p: round(self.avg_reward(p), 2) for p in self.env_steps}
            reward = f"{rewards[0]:.2f}" if len(rewards) == 1 else rewards
            per = " per policy" if len(rewards) > 1 else ""
            reward_text = f"avg episode reward {reward} over the last {counted} episodes{per}"
        else:
            reward_text = "no episode finished"
        line = (
            f"Run {FINISHED.get(status, status)}: {self.total_frames():,} frames in "
            f"{duration(wall_s)}, {reward_text}; outputs in {folder}"
        )
        return line + " (the same command resumes it)" if status == "interrupted" else line

    def _custom_stats_text(self) -> str:
        """The envs' true objective (when they give one) and extra stats (when there are few), for the progress line."""
        text = ""
        if self.env_objective:
            objective = {p: _rounded(self.avg_stat("true_objective", p)) for p in self.env_steps}
            text += f"Avg true objective: {objective}. "
        keys = self.extra_keys()
        if keys and len(keys) <= PROGRESS_LINE_EXTRA_KEYS:
            extra = {p: {k: round(v, 3) for k, v in self.extra_means(p).items()} for p in self.env_steps}
            text += f"Extra stats: {extra}. "
        return text

    def summary(self, now: float) -> dict:
        """The frame, rate and episode fields of summary.json."""
        wall = now - self.start_time
        frames = sum(self.session_frames().values())
        steady = float("nan")
        if self.steady_start is not None:
            t0, f0 = self.steady_start
            if now - t0 > 1e-3:
                steady = (self.total_frames() - f0) / (now - t0)
        return {
            "env_frames": dict(self.env_steps),
            "fps": frames / wall if wall > 0 else 0.0,
            "fps_steady": steady if steady == steady else None,
            "fps_windows": FPS_WINDOWS,
            "wall_time_s": wall,
            "avg_episode_reward": {
                p: (r if r == r else None) for p, r in ((p, self.avg_reward(p)) for p in self.env_steps)
            },
            "avg_true_objective": {p: self.avg_stat("true_objective", p) for p in self.env_steps},
            **({"episode_extra_stats": {p: self.extra_means(p) for p in self.env_steps}} if self.extra_keys() else {}),
            "num_episodes": sum(self.num_episodes.values()),
            "num_episodes_per_policy": dict(self.num_episodes),
            "policy_versions": dict(self.versions),
            "max_policy_lag": dict(self.max_lag),
        }


FINISHED = {"ok": "finished", "interrupted": "interrupted", "error": "failed"}


def _rounded(value: float | None) -> float:
    return float("nan") if value is None else round(value, 3)


class TrainWindow:
    """The learner's statistics since they were last written: per policy, key -> [sum, iterations that reported it]
    (a skipped batch reports no losses, so each key keeps its own count)."""

    def __init__(self, num_policies: int):
        self.sums: dict[int, dict[str, list[float]]] = {p: {} for p in range(num_policies)}

    def add(self, policy_id: int, stats: dict) -> None:
        window = self.sums[policy_id]
        for key, value in stats.items():
            total = window.setdefault(key, [0.0, 0])
            total[0] += value
            total[1] += 1

    def take_means(self) -> dict[int, dict[str, float]]:
        """Per policy with something to write, the mean of each key; the window starts over."""
        means = {p: {k: total / n for k, (total, n) in window.items()} for p, window in self.sums.items() if window}
        for p in means:
            self.sums[p] = {}
        return means


class StalenessTally:
    """Trajectory ages and policy lags per policy (sf.profiling.staleness histograms): over the whole run for
    summary.json, and since the last progress line for TensorBoard."""

    def __init__(self, num_policies: int):
        policies = range(num_policies)
        self.ages = {p: {} for p in policies}  # trajectory age bin -> steps, over the whole run
        self.lags = {p: {} for p in policies}  # policy lag -> steps
        self.recent_ages = {p: {} for p in policies}  # the same since the last report
        self.recent_lags = {p: {} for p in policies}

    def add(self, policy_id: int, ages: dict[int, int], lags: dict[int, int]) -> None:
        for total, more in ((self.ages, ages), (self.recent_ages, ages), (self.lags, lags), (self.recent_lags, lags)):
            staleness.add_counts(total[policy_id], more)

    def take_recent(self, policy_id: int) -> tuple[dict[int, int], dict[int, int]]:
        """(ages, lags) since the last call for this policy."""
        recent = self.recent_ages[policy_id], self.recent_lags[policy_id]
        self.recent_ages[policy_id], self.recent_lags[policy_id] = {}, {}
        return recent

    def summary(self) -> dict:
        all_ages: dict[int, int] = {}
        all_lags: dict[int, int] = {}
        for p in self.ages:
            staleness.add_counts(all_ages, self.ages[p])
            staleness.add_counts(all_lags, self.lags[p])
        return {
            "trajectory_age_s": {
                "p50": staleness.age_quantile(all_ages, 0.5),
                "p95": staleness.age_quantile(all_ages, 0.95),
            },
            "policy_lag_hist": staleness.lag_histogram(all_lags),
        }
