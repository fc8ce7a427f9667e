"""Watching a run: the live feed, the verdict of the last seconds, `sf.profile top`, the progress line, TensorBoard's
profile dashboard and the advice, on hand-made feeds (exact numbers) and on the shared simulation-bound run."""

import json
import re
import struct
import subprocess
import sys

import pytest

from sf.analysis.advice import advise
from sf.analysis.bottleneck import others_cores
from sf.analysis.recent import LIVE_WINDOW_S, recent_experiment
from sf.analysis.report import build_report, format_text
from sf.analysis.run_data import load_experiment
from sf.analysis.top import LiveSource, ReplaySource, frame_text
from sf.profiling.live_feed import LIVE_FILE, Follower, LiveFeed
from sf.profiling.series import snapshot_from_record
from sf.profiling.tb_layout import layout
from tests.conftest import ROOT, read_scalars

# the runs of conftest's session fixtures: built once, by the one pytest-xdist worker that runs every test reading them
pytestmark = pytest.mark.xdist_group("shared_runs")

SWITCH_T = 20.0  # the hand-made run turns from simulation-bound to learner-bound here
CONFIG = {"num_workers": 2, "num_envs_per_worker": 8, "worker_num_splits": 2, "policy_workers_per_policy": 1}
CONFIG |= {"inference_placement": "own_process", "batch_size": 1024, "num_epochs": 1, "serial_mode": False}


def node(seconds, **children):
    return {"time": seconds, "children": children}


def rates(t: float) -> dict[str, dict[str, float]]:
    """Seconds per second of each key, before and after the switch."""
    if t <= SWITCH_T:
        return {
            "RolloutWorker": {"env_step": 0.8, "enqueue_policy_requests": 0.1, "wait_actions": 0.1},
            "InferenceWorker": {"one_step": 0.3, "wait_requests": 0.7},
            "Learner": {"train": 0.2, "wait_batch": 0.8},
        }
    return {
        "RolloutWorker": {"env_step": 0.2, "enqueue_policy_requests": 0.05, "wait_slots": 0.75},
        "InferenceWorker": {"one_step": 0.1, "wait_requests": 0.9},
        "Learner": {"train": 0.95, "wait_batch": 0.05},
    }


def cumulative(role: str, t: float, step: float = 0.5) -> dict:
    """The component's tree at time t: every rate integrated from 0."""
    total: dict[str, float] = {}
    at = 0.0
    while at < t - 1e-9:
        for key, rate in rates(at + step / 2)[role].items():
            total[key] = total.get(key, 0.0) + rate * min(step, t - at)
        at += step
    return {key: node(seconds) for key, seconds in total.items()}


COMPONENTS = {
    "RolloutWorker_w0": (10, "RolloutWorker"),
    "RolloutWorker_w1": (11, "RolloutWorker"),
    "InferenceWorker_p0-w0": (12, "InferenceWorker"),
    "Learner 0": (13, "Learner"),
}


def record(name: str, t: float) -> dict:
    pid, role = COMPONENTS[name]
    return {
        "t": t,
        "frames": int(1000 * t) if t <= SWITCH_T else int(1000 * SWITCH_T + 300 * (t - SWITCH_T)),
        "component": name,
        "pid": pid,
        "final": False,
        "cpu_s": 0.06 * t,
        "run_delay_s": 0.0,
        "cores": 2,
        "lifetime_s": t,
        "peak_rss_bytes": 300 * 2**20,
        "tree": cumulative(role, t),
    }


def write_feed(path, until: float, rotate_bytes: int = 1 << 30) -> LiveFeed:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(CONFIG))
    feed = LiveFeed(path, rotate_bytes)
    t = 2.0
    while t <= until:
        for name in COMPONENTS:
            feed.append(record(name, t))
        feed.append({"progress": {"t": t, "frames": record("Learner 0", t)["frames"], "policy_lag": 1.5}})
        t += 2.0
    return feed


def test_follower_reads_each_record_once_across_rotations_and_restarts(tmp_path):
    feed = LiveFeed(tmp_path, rotate_bytes=500)  # about 11 records a file
    follower = Follower(tmp_path, keep_s=1e9)
    rotations = 0
    for t in range(1, 41):
        before = feed.written
        feed.append({"progress": {"t": float(t), "frames": t}})
        rotations += feed.written < before
        if t % 7 == 0:  # the follower looks more often than the file rotates
            follower.poll()
    assert rotations >= 3
    assert [p.t for p in follower.poll().progress] == [float(t) for t in range(1, 41)]
    LiveFeed(tmp_path)  # a new session starts a new feed
    (tmp_path / LIVE_FILE).write_text(json.dumps({"progress": {"t": 1.0, "frames": 5}}) + "\n")
    assert [p.t for p in follower.poll().progress] == [1.0]


def test_the_verdict_follows_a_bottleneck_switched_on_within_three_snapshots(tmp_path):
    write_feed(tmp_path, 40.0)
    series = Follower(tmp_path).poll().snapshots
    kinds = {}
    for t in range(4, 41, 2):
        kinds[t] = advise(recent_experiment(series, 6.0, float(t), config=CONFIG)).verdict.kind
    assert all(kinds[t] == "simulation" for t in range(4, 21, 2))
    first_learner = min(t for t, k in kinds.items() if k == "learner")
    assert first_learner <= SWITCH_T + 6  # three snapshots, 2 s apart
    assert all(kinds[t] == "learner" for t in range(int(SWITCH_T) + 6, 41, 2))


def test_advice_on_a_simulation_bound_run_prices_more_workers_by_hand(tmp_path):
    """Rollout workers busy 0.9 (env_step 0.8), inference 0.3, learner 0.2; 0.06 cores each of 2: the rollout
    group spread over m workers is busy 0.9 * 2 / m, limited next by the inference process at 0.3, so 6 workers buy
    0.9 / 0.3 - 1 = +200 % (5 give +150 %, under 90 % of the best)."""
    write_feed(tmp_path, 20.0)
    experiment = recent_experiment(Follower(tmp_path).poll().snapshots, 6.0, config=CONFIG)
    advice = advise(experiment)
    assert advice.verdict.kind == "simulation"
    assert advice.headline() == "simulation-bound 90 %"
    workers = next(m for m in advice.moves if m.flag == "--num_workers")
    assert (workers.now, workers.to) == ("2", "6")
    assert workers.fps_gain == pytest.approx(2.0)
    assert workers.limit == "InferenceWorker"
    assert advice.moves[0] is workers


def test_top_once_fits_80_by_24_and_says_what_bounds_the_run(tmp_path):
    write_feed(tmp_path, 16.0)
    text = frame_text(LiveSource(tmp_path).frame(6.0))
    lines = text.splitlines()
    assert len(lines) <= 24 and max(len(line) for line in lines) <= 80, text
    assert "verdict simulation-bound 90 %" in text
    assert "advice: --num_workers=6 (now 2): +200% FPS" in text
    assert re.search(r"FPS 1,000 \(last 6 s\)", text)
    assert "policy lag 1.50" in text
    rollout = next(line for line in lines if line.startswith("Rollout w0"))
    assert " 90%  10%" in rollout and "inference" in rollout and " 0.1 " in rollout and "300M" in rollout


def test_top_without_a_terminal_prints_one_frame_and_suggests_once(tmp_path, capsys):
    from sf.analysis.top import NO_TERMINAL, main

    write_feed(tmp_path, 16.0)
    assert main([str(tmp_path), "--window=6"]) == 0  # pytest's captured stdout is no terminal
    out, err = capsys.readouterr()
    assert out == frame_text(LiveSource(tmp_path).frame(6.0))
    assert err.strip() == NO_TERMINAL and "--once" in NO_TERMINAL


def test_top_replay_shows_the_run_as_it_was_at_a_moment(tmp_path):
    write_feed(tmp_path, 40.0)
    before = frame_text(ReplaySource(tmp_path, speed=1.0, at=14.0).frame(6.0))
    after = frame_text(ReplaySource(tmp_path, speed=1.0, at=40.0).frame(6.0))
    assert "verdict simulation-bound" in before and "replay at 14 of 40 s" in before
    assert "verdict learner-bound" in after and "(end)" in after
    # before a component's first snapshot, and before every component has two, the frame says it is waiting
    (tmp_path / "late").mkdir()
    late = write_feed(tmp_path / "late", 10.0)
    late.append(record("Learner 0", 12.0) | {"component": "Batcher 0"})
    waiting = frame_text(ReplaySource(tmp_path / "late", speed=1.0, at=3.0).frame(6.0))
    assert "waiting for two snapshots" in waiting


def test_snapshot_records_survive_the_round_trip(tmp_path):
    r = record("Learner 0", 4.0)
    snap = snapshot_from_record(json.loads(json.dumps(r)))
    assert (snap.t, snap.frames, snap.peak_rss_bytes, snap.lifetime_s) == (4.0, 4000, 300 * 2**20, 4.0)


def test_a_watched_run_writes_the_feed_the_progress_verdict_and_the_dashboard(sleepy_run):
    """The shared run of the simulation-bound case (2 workers x 8 envs whose step sleeps 1 ms, two cores mostly
    idle): its progress lines, `sf.profile top`, the report and the advice agree."""
    log = (sleepy_run / "sf_log.txt").read_text()
    bounds = re.findall(rf"Bound \(last {LIVE_WINDOW_S:.0f} s\): (\w+)-bound (\d+) %", log)
    assert bounds and bounds[-1][0] == "simulation", log[-3000:]
    experiment = load_experiment(sleepy_run)
    others = others_cores(experiment)
    if others > 0.5:  # other programs kept the cores busy: moves are priced on the cores they left
        machine = next(c.cores for c in experiment.components if c.cores)
        for move in advise(experiment).moves:
            limit = re.search(r"all ([\d.]+) cores", move.limit)
            assert limit is None or float(limit.group(1)) < machine, move
        pytest.skip(f"other programs kept {others:.1f} cores busy during the run")
    assert re.search(r"Try --num_workers=\d+ \+\d+% FPS", log)
    out = subprocess.run(
        [sys.executable, "-m", "sf.profile", "top", str(sleepy_run), "--once"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "finished (ok)" in out.stdout and "verdict simulation-bound" in out.stdout, out.stdout
    assert "advice: --num_workers=" in out.stdout
    report = build_report(load_experiment(sleepy_run))
    assert report.verdict.kind == "simulation"
    assert report.moves[0].flag == "--num_workers" and int(report.moves[0].to) > 2 and report.moves[0].fps_gain > 0.5
    assert report.moves[0].line() in format_text(report)


def test_the_run_writes_a_profile_dashboard_whose_charts_match_its_tags(sleepy_run):
    from tensorboardX.proto import event_pb2, layout_pb2

    tags = set(read_scalars(sleepy_run))
    configs = []
    for path in sorted(sleepy_run.glob(".summary/0/events.out.tfevents.*")):
        data, at = path.read_bytes(), 0
        while at < len(data):
            (length,) = struct.unpack("<Q", data[at : at + 8])
            event = event_pb2.Event.FromString(data[at + 12 : at + 12 + length])
            at += 12 + length + 4
            configs += [v for v in event.summary.value if v.tag == "custom_scalars__config__"]
    assert len(configs) == 1
    written = layout_pb2.Layout.FromString(configs[0].tensor.string_val[0])
    assert [c.title for c in written.category] == ["profile"]
    charts = {chart.title: list(chart.multiline.tag) for chart in written.category[0].chart}
    assert charts == {title: regexes for title, (_, regexes) in layout()["profile"].items()}
    for title, regexes in charts.items():
        if "trajectory age" in title or "policy lag" in title:
            continue  # written only once trained batches report them, which a short run may not
        assert any(re.match(rx, tag) for rx in regexes for tag in tags), (title, regexes)
    busy = [v for tag, values in read_scalars(sleepy_run).items() if tag.endswith("/busy") for v in values]
    assert busy and all(0.0 <= v <= 1.0 for v in busy)
    assert any(re.match(r"profile/RolloutWorker_w0/wait_actions$", tag) for tag in tags)


def test_top_groups_a_ray_run_by_node_and_folds_roles_that_do_not_fit(tmp_path):
    """Sixteen rollout workers on two nodes, the learner on the first: node headers, and one row per role and node
    once the components outnumber the terminal's lines."""
    (tmp_path / "config.json").write_text(json.dumps(CONFIG | {"num_workers": 16}))
    feed = LiveFeed(tmp_path)
    names = {f"RolloutWorker_w{i}": ("node-a" if i < 8 else "node-b", 100 + i, "RolloutWorker") for i in range(16)}
    names["Learner 0"] = ("node-a", 13, "Learner")
    for t in (2.0, 4.0, 6.0):
        for name, (host, pid, role) in names.items():
            r = record("Learner 0", t) | {"component": name, "pid": pid, "tree": cumulative(role, t)}
            feed.append(r | {"node": {"host": host, "ray_node_id": f"{host}-0123456789"}})
    text = frame_text(LiveSource(tmp_path).frame(4.0))
    lines = text.splitlines()
    assert len(lines) <= 24 and max(map(len, lines)) <= 80, text
    assert lines.index("node node-a node-a-0") < lines.index("node node-b node-b-0")
    folded = [line for line in lines if line.startswith("RolloutWorker x8")]
    assert len(folded) == 2 and all(" 90%  10%" in line for line in folded), text
