"""The runner's pieces, each alone: progress and frame rates, the learner-statistics window, staleness tallies, the
profile records and timing scalars, the schedule and the stop status."""

from __future__ import annotations

import json
import math
import types

import pytest

from sf.profiling.series import read_series
from sf.runner.control import Schedule, StopRequest
from sf.runner.outputs import ProfileRecords, TimingScalars
from sf.runner.stats import Progress, StalenessTally, TrainWindow, duration


def test_session_frames_leave_out_a_resumed_checkpoint_once_every_learner_reported():
    progress = Progress(num_policies=2, stats_avg=10, start_time=0.0)
    progress.on_learner_stats(0, 5000, 7, {}, now=1.0)  # policy 0 resumed at 5000 frames
    assert progress.start_steps is None  # policy 1 has not reported yet
    progress.on_learner_stats(1, 0, 0, {}, now=1.0)
    assert progress.start_steps == {0: 5000, 1: 0}
    progress.on_learner_stats(0, 6024, 8, {"policy_lag": 0.5, "policy_lag_max": 2.0}, now=2.0)
    progress.on_learner_stats(1, 1024, 1, {"policy_lag": 0.0, "policy_lag_max": 1.0}, now=2.0)
    assert progress.session_frames() == {0: 1024, 1: 1024}
    assert progress.total_frames() == 7048
    assert progress.max_lag == {0: 2.0, 1: 1.0}
    assert progress.trained_for(1024) and not progress.trained_for(1025)


def test_frame_rates_over_windows_and_the_steady_rate_from_the_first_trained_batch():
    progress = Progress(num_policies=1, stats_avg=10, start_time=0.0)
    progress.on_learner_stats(0, 0, 0, {}, now=0.0)
    progress.on_learner_stats(0, 1000, 1, {"policy_lag_max": 0.0}, now=10.0)  # the first trained batch
    assert progress.sample_fps(now=10.0) == [100.0, 100.0, 100.0]
    progress.on_learner_stats(0, 5000, 2, {"policy_lag_max": 0.0}, now=20.0)
    fps = progress.sample_fps(now=20.0)
    assert fps[0] == pytest.approx(400.0)  # (5000 - 1000) / 10 s: only the last 10 s
    assert fps[1] == pytest.approx(250.0)  # the whole 20 s
    summary = progress.summary(now=20.0)
    assert summary["fps"] == pytest.approx(250.0)
    assert summary["fps_steady"] == pytest.approx(400.0)  # frames after the first batch over the time since
    assert summary["env_frames"] == {0: 5000}


def test_episode_statistics_and_the_progress_line():
    progress = Progress(num_policies=1, stats_avg=2, start_time=0.0)
    assert math.isnan(progress.avg_reward(0)) and progress.avg_episode_length(0) is None
    assert progress.reward_text() == "[]"  # as Sample Factory: only the policies with a finished episode
    progress.on_episodes(0, [(1.0, 10, None, None), (2.0, 20, None, None), (4.0, 40, None, None)])  # the last 2
    assert progress.avg_reward(0) == 3.0 and progress.avg_episode_length(0) == 30.0
    assert progress.num_episodes == {0: 3}
    progress.on_learner_stats(0, 2048, 2, {"policy_lag": 0.123, "policy_lag_max": 1.0}, now=1.0)
    line = progress.progress_line([1.0, 2.0, float("nan")])
    assert line == (
        "Fps is (10 sec: 1.0, 60 sec: 2.0, 300 sec: nan). Total num frames: 2048. Avg episode reward: [(0, '3.000')]. "
        "Policy lag: [0.12]"
    )
    assert progress.summary(now=1.0)["avg_episode_reward"] == {0: 3.0}
    assert progress.summary(now=1.0)["avg_true_objective"] == {0: 3.0}  # no env objective: the return stands in
    assert "episode_extra_stats" not in progress.summary(now=1.0)


def test_true_objective_and_extra_stats_are_averaged_per_policy():
    progress = Progress(num_policies=2, stats_avg=3, start_time=0.0)
    progress.on_episodes(0, [(1.0, 10, 0.0, {"coins": 2.0}), (3.0, 10, 1.0, {"coins": 4.0, "hits": [1.0, 0.0]})])
    progress.on_episodes(1, [(5.0, 7, None, {"coins": 10.0})])
    progress.on_episodes(0, [(2.0, 10, 1.0, {"coins": 9.0}), (2.0, 10, 1.0, {"coins": 3.0})])  # coins keeps 3
    assert progress.avg_stat("true_objective", 0) == pytest.approx(3.0 / 3)  # 1, 1, 1 of the last three
    assert progress.avg_stat("true_objective", 1) == 5.0  # the return stands in for a missing objective
    assert progress.extra_means(0) == {"coins": pytest.approx((4.0 + 9.0 + 3.0) / 3), "hits": 0.5}
    assert progress.extra_means(1) == {"coins": 10.0}
    assert list(progress.policy_avg_stats["coins"][0]) == [4.0, 9.0, 3.0]  # Sample Factory's shape, per policy
    summary = progress.summary(now=1.0)
    assert summary["avg_true_objective"] == {0: pytest.approx(1.0), 1: 5.0}
    assert summary["episode_extra_stats"] == {0: progress.extra_means(0), 1: {"coins": 10.0}}
    line = progress.progress_line([1.0, 2.0, 3.0])
    assert (
        "Avg true objective: {0: 1.0, 1: 5.0}. Extra stats: {0: {'coins': 5.333, 'hits': 0.5}, 1: {'coins': 10.0}}. "
        in line
    )


def test_the_progress_line_says_the_share_done_and_the_time_left():
    progress = Progress(num_policies=2, stats_avg=100, start_time=0.0, target_frames=200_000, time_limit_s=3600.0)
    progress.on_learner_stats(0, 150_000, 10, {}, now=5.0)
    progress.on_learner_stats(1, 50_000, 10, {}, now=5.0)
    # the policy furthest behind has 25 % of its frames; 150,000 of each policy's frames are left, 300,000 in all,
    # at 10,000 frames/s over the last 60 s: 30 s
    line = progress.progress_line([20_000.0, 10_000.0, 10_000.0], now=10.0)
    assert line.endswith("Policy lag: [nan, nan]. Done: 25 % of 200,000 frames, about 30 s left")
    # --train_for_seconds comes first: 3600 s from the start, 3590 s gone
    assert progress.done(10_000.0, now=3590.0) == "Done: 25 % of 200,000 frames, about 10 s left (--train_for_seconds)"
    assert progress.done(float("nan"), now=None) == "Done: 25 % of 200,000 frames"  # no rate yet
    progress.on_learner_stats(1, 200_704, 20, {}, now=20.0)
    progress.on_learner_stats(0, 200_704, 20, {}, now=20.0)
    assert progress.done(10_000.0, now=20.0) == "Done: 100 % of 200,000 frames"  # nothing left to estimate
    assert duration(59) == "59 s" and duration(600) == "10 min" and duration(5 * 3600) == "5.0 h"


def test_no_time_left_from_the_default_time_limit_and_which_learners_are_starting():
    """Interrupted during start-up: no rate yet, and --train_for_seconds at its default (1e10 s) is no estimate."""
    progress = Progress(num_policies=2, stats_avg=100, start_time=0.0, target_frames=200_000, time_limit_s=1e10)
    assert progress.done(0.0, now=3.0) == "Done: 0 % of 200,000 frames"
    assert progress.starting() == [0, 1]
    progress.on_learner_stats(1, 0, 0, {}, now=1.0)  # learner 1 built its model and waits for a batch
    assert progress.starting() == [0]


def test_a_learner_killed_as_it_started_is_not_said_to_lose_an_iteration():
    from sf.supervision.supervisor import _kill_warning

    assert _kill_warning("Learner 0", 5.0, False, starting=True) == (
        "Learner 0 did not stop within 5 s, still starting (it had trained nothing): killing it"
    )
    assert "middle of a training iteration" in _kill_warning("Learner 0", 5.0, False)
    assert "starting" not in _kill_warning("RolloutWorker_w0", 5.0, True, starting=True)


def test_the_finished_line_says_how_the_run_ended_its_frames_time_reward_and_folder():
    progress = Progress(num_policies=1, stats_avg=100, start_time=0.0)
    assert progress.finished_line("ok", "train_dir/x", 6.5) == (
        "Run finished: 0 frames in 6 s, no episode finished; outputs in train_dir/x"
    )
    progress.on_learner_stats(0, 200_704, 196, {}, now=6.0)
    progress.on_episodes(0, [(500.0, 500, None, None), (499.0, 499, None, None)])
    assert progress.finished_line("ok", "train_dir/x", 6.5) == (
        "Run finished: 200,704 frames in 6 s, avg episode reward 499.50 over the last 2 episodes; outputs in "
        "train_dir/x"
    )
    assert progress.finished_line("interrupted", "train_dir/x", 95.0) == (
        "Run interrupted: 200,704 frames in 2 min, avg episode reward 499.50 over the last 2 episodes; outputs in "
        "train_dir/x (the same command resumes it)"
    )


def test_train_window_means_each_key_over_the_iterations_that_reported_it():
    window = TrainWindow(num_policies=2)
    window.add(0, {"loss": 1.0, "kl": 0.5})
    window.add(0, {"loss": 3.0})  # a skipped batch reports no kl
    assert window.take_means() == {0: {"loss": 2.0, "kl": 0.5}}
    assert window.take_means() == {}  # started over


def test_staleness_tally_keeps_the_run_and_hands_out_what_is_recent():
    tally = StalenessTally(num_policies=1)
    tally.add(0, {10: 3}, {0: 2, 1: 1})
    tally.add(0, {10: 1}, {1: 1})
    assert tally.take_recent(0) == ({10: 4}, {0: 2, 1: 2})
    assert tally.take_recent(0) == ({}, {})
    summary = tally.summary()
    assert summary["policy_lag_hist"] == {"edges": [0, 1, 2], "counts": [2, 2]}
    assert summary["trajectory_age_s"]["p50"] is not None


def test_profile_records_keep_the_latest_tree_and_append_every_one_to_the_series(tmp_path):
    records = ProfileRecords(tmp_path / "profile_series.jsonl")
    records.nodes["Learner 0"] = {"host": "a"}
    tree = {"train": {"time": 1.0, "children": {}}}
    records.record("Learner 0", 11, tree, None, None, final=False, t=1.0, frames=100)
    records.record("Learner 0", 11, {"train": {"time": 2.0, "children": {}}}, None, None, final=True, t=2.0, frames=200)
    records.set_transfer("Learner 0", {"bytes": 5})
    entry = records.profiles["Learner 0"]
    assert (
        entry["tree"]["train"]["time"] == 2.0 and entry["node"] == {"host": "a"} and entry["transfer"] == {"bytes": 5}
    )
    snapshots = read_series(tmp_path)["Learner 0"]
    assert [(s.t, s.frames, s.final) for s in snapshots] == [(1.0, 100, False), (2.0, 200, True)]
    json.dumps(records.profiles)  # what profile.json is written from


def test_trees_print_in_contract_order_under_their_resources_header(tmp_path):
    records = ProfileRecords(tmp_path / "profile_series.jsonl")
    records.profiles = {
        name: {"name": name, "pid": 1, "tree": {"k": {"time": 0.5, "children": {}}}}
        for name in ("Runner", "RolloutWorker_w1", "Learner 0", "RolloutWorker_w0", "Batcher 0")
    }
    records.profiles["Learner 0"]["resources"] = {
        "wall_s": 10.0,
        "cpu_user_s": 2.0,
        "cpu_system_s": 0.5,
        "peak_rss_bytes": 2**20,
    }
    blocks = records.trees_text()
    assert [b.splitlines()[0] for b in blocks] == [
        "Batcher 0 profile tree view:",
        "Learner 0: cpu 2.5 s of 10.0 s, rss 1 MiB",
        "Learner 0 profile tree view:",
        "RolloutWorker_w0 profile tree view:",
        "RolloutWorker_w1 profile tree view:",
        "Runner profile tree view:",
    ]
    assert blocks[0].splitlines()[1] == "k: 0.5000"


def test_timing_scalars_give_cpu_percent_since_the_last_snapshot():
    scalars = TimingScalars()
    level = {"train": {"time": 3.0, "children": {}}}
    first = scalars.scalars("Learner 0", level, {"wall_s": 10.0, "cpu_user_s": 4.0, "cpu_system_s": 1.0})
    assert first == {"timing/Learner_0/train": 3.0, "timing/Learner_0/cpu_percent": 50.0}
    second = scalars.scalars("Learner 0", level, {"wall_s": 20.0, "cpu_user_s": 12.0, "cpu_system_s": 3.0})
    assert second["timing/Learner_0/cpu_percent"] == 100.0
    assert "timing/Learner_0/cpu_percent" not in scalars.scalars("Learner 0", level, None)


def test_schedule_saves_nothing_in_benchmark_or_sampling_runs():
    flags = dict(experiment_summaries_interval=3.0, save_every_sec=120, save_best_every_sec=5)
    training = Schedule.from_cfg(types.SimpleNamespace(benchmark=False, sampling_only=False, **flags))
    assert (training.save_s, training.save_best_s, training.timing_s) == (120, 5, 3.0)
    for mode in ({"benchmark": True, "sampling_only": False}, {"benchmark": False, "sampling_only": True}):
        schedule = Schedule.from_cfg(types.SimpleNamespace(**mode, **flags))
        assert schedule.save_s is None and schedule.save_best_s is None


def test_an_error_wins_over_an_earlier_stop_reason_and_the_first_error_stays():
    stop = StopRequest()
    stop.ask("ok")
    stop.ask("interrupted")
    assert (stop.status, stop.error) == ("ok", None)
    stop.ask("error", "Learner 0: boom")
    stop.ask("error", "RolloutWorker_w0: later")
    assert (stop.status, stop.error) == ("error", "Learner 0: boom")
