"""One timeline of the whole run: a track per component, slices named after Timing keys, messages as flows."""

import json

import pytest
from conftest import CARTPOLE_LAYOUT, run_sf

from sf.profiling import timeline
from sf.utils import timing as timing_module
from sf.utils.timing import Timing

FAST = [*CARTPOLE_LAYOUT, "--profiling_timeline=True"]


def _tree_has(tree: dict, path: str) -> bool:
    level = tree
    for key in path.split("/"):
        if key not in level:
            return False
        level = level[key]["children"]
    return True


def _check_timeline(exp, one_process: bool) -> dict:
    trace = json.loads((exp / "profiling" / "timeline.json").read_text())
    assert not (exp / "profiling" / timeline.PARTS_DIR).exists()
    profile = json.loads((exp / "profile.json").read_text())
    events = trace["traceEvents"]
    tracks = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert sorted(tracks.values()) == sorted(profile)  # one track per component, named after it
    os_pids = {int(e["args"]["labels"].split()[1]) for e in events if e["name"] == "process_labels"}
    assert len(os_pids) == (1 if one_process else 5)

    scopes = [e for e in events if e["ph"] == "X" and e["cat"] == "timing"]
    for event in scopes:  # every slice is a Timing key of its component's tree
        assert event["name"] == event["args"]["path"].rsplit("/", 1)[-1]
        assert _tree_has(profile[tracks[event["pid"]]]["tree"], event["args"]["path"]), event
    named = {(tracks[e["pid"]], e["name"]) for e in scopes}
    assert {("RolloutWorker_w0", "env_step"), ("InferenceWorker_p0-w0", "forward"), ("Learner 0", "update")} <= named

    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert starts and set(starts) == set(ends)
    for flow_id, end in ends.items():  # clocks agree: nothing arrives before it was sent
        assert end["ts"] >= starts[flow_id]["ts"]
    pairs = {(tracks[starts[i]["pid"]], tracks[ends[i]["pid"]], ends[i]["name"]) for i in ends}
    assert ("RolloutWorker_w0", "InferenceWorker_p0-w0", "PolicyRequest") in pairs  # named after the kind's class
    assert ("InferenceWorker_p0-w0", "RolloutWorker_w1", "Actions") in pairs
    assert ("Batcher 0", "Learner 0", "Train") in pairs
    return trace


def test_parallel_timeline_has_a_track_per_component_and_flows(tmp_path):
    # inference in processes of its own: the flows between rollout and inference workers cross processes
    result = run_sf(
        [
            *FAST,
            "--train_for_env_steps=4000",
            "--experiment=tl",
            f"--train_dir={tmp_path}",
            "--inference_placement=own_process",
        ],
        timeout=240,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    trace = _check_timeline(tmp_path / "tl", one_process=False)
    assert trace["otherData"]["clock"] == timeline.SHARED_CLOCK


def test_serial_timeline_splits_the_one_process_by_component(tmp_path):
    result = run_sf(
        [
            *FAST,
            "--serial_mode=True",
            "--async_rl=False",
            "--train_for_env_steps=2000",
            "--experiment=tls",
            f"--train_dir={tmp_path}",
        ],
        timeout=240,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    _check_timeline(tmp_path / "tls", one_process=True)


def test_recorder_installs_and_removes_its_hook():
    plain_exit = timing_module._Node.__exit__
    recorder = timeline.Recorder(capacity=3)
    t = Timing("Learner 0")
    for _ in range(5):
        with t.add_time("train"), t.add_time("update"):
            pass
    recorder.stop()
    assert timing_module._Node.__exit__ is plain_exit  # off again: scopes cost what they did before
    rows = recorder.rows()
    assert len(rows) == 3  # bounded: the newest events stay
    assert [r[2] for r in rows] == ["train", "train/update", "train"]
    assert all(r[1] == "Learner 0" and r[4] >= r[3] for r in rows)


def test_parts_on_other_clocks_are_aligned_by_their_wall_offsets():
    # two processes whose perf_counter origins differ by 1000 s; the same wall instant must get the same ts
    a = {
        "pid": 10,
        "clock": "other",
        "wall_offset_s": 5000.0,
        "rows": [("X", "Learner 0", "train", 1.0, 1.5), ("s", "Learner 0", 7, 1.2, "LearnerVersion")],
    }
    b = {
        "pid": 11,
        "clock": "other",
        "wall_offset_s": 4000.0,
        "rows": [
            ("H", "Batcher 0", "LearnerVersion", 1001.2005, 1001.3),
            ("f", "Batcher 0", 7, 1001.2005, "LearnerVersion"),
        ],
    }
    trace = timeline.chrome_trace([a, b])
    by_phase = {e["ph"]: e for e in trace["traceEvents"] if e["ph"] in ("s", "f")}
    assert by_phase["f"]["ts"] - by_phase["s"]["ts"] == pytest.approx(500.0)  # microseconds
    train = next(e for e in trace["traceEvents"] if e.get("name") == "train")
    assert train["ts"] == 0.0 and train["dur"] == pytest.approx(5e5)


def test_recorder_rows_match_the_tree_alone_and_beside_another_hook():
    """The recorder's inlined exit (alone) and its wrapped form (beside another hook) record the same rows."""
    seen: list[str] = []
    other = timing_module.ScopeHook(None, lambda node: seen.append(node.path))
    recorder = timeline.Recorder()
    t = Timing("Learner 0")
    try:
        with t.add_time("train"), t.timeit("update"):
            pass
        timing_module.add_scope_hook(other)
        with t.add_time("train"), t.time_avg("clip"):
            pass
        timing_module.remove_scope_hook(other)
        with t.add_time("train"):
            pass
    finally:
        recorder.stop()
    rows = recorder.rows()
    assert [r[2] for r in rows] == ["train/update", "train", "train/clip", "train", "train"]
    assert seen == ["train/clip", "train"]
    assert all(r[0] == "X" and r[1] == "Learner 0" and r[4] >= r[3] for r in rows)
    # the row of an inlined exit ends at the reading the node's time was taken from
    assert rows[0][4] - rows[0][3] == t.get("train/update")


def test_the_merge_reads_only_this_runs_parts_and_never_unpickles(tmp_path):
    """An earlier run's part, a pickle someone left and a file that is no part stay out; only JSON is read."""
    import os
    import pickle
    import time

    parts = tmp_path / timeline.PARTS_DIR
    parts.mkdir()
    fresh = {"pid": 11, "clock": timeline.SHARED_CLOCK, "wall_offset_s": 0.0, "rows": [["C", "Runner", "tick", 1, 2]]}
    stale = {**fresh, "pid": 12, "rows": [["C", "OldRun", "tick", 1, 2]]}
    (parts / "OldRun.12.json").write_text(json.dumps(stale))
    os.utime(parts / "OldRun.12.json", (1e9, 1e9))
    since = time.time() - 1.0
    (parts / "Runner.11.json").write_text(json.dumps(fresh))
    (parts / "Planted.13.pkl").write_bytes(pickle.dumps({"rows": []}))
    (parts / "Other.14.json").write_text(json.dumps({"not": "a part"}))
    out = timeline.merge(tmp_path, since=since)
    names = {e["args"]["name"] for e in json.loads(out.read_text())["traceEvents"] if e["name"] == "process_name"}
    assert names == {"Runner"}
    assert not parts.exists()
