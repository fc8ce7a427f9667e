"""`python -m sf.profile report <run> --compare <baseline>`: marks a scope made 20 % slower, stays quiet otherwise."""

import dataclasses
import json
import shutil
import subprocess
import sys

import pytest

from sf.analysis.compare import MIN_CHANGE, Z, compare
from sf.analysis.run_data import load_experiment
from sf.profiling.series import SERIES_FILE
from sf_examples.profiling.induced_bottlenecks import CASES, run_case
from tests.conftest import ROOT

# the runs of conftest's session fixtures: built once, by the one pytest-xdist worker that runs every test reading them
pytestmark = pytest.mark.xdist_group("shared_runs")

SLEEPY = CASES["simulation"]


def scale_scope(tree: dict, key: str | None, factor: float) -> dict:
    """`key` (every key when None, waits excepted) `factor` times as long."""
    return {
        k: {
            "time": v["time"] * (factor if k == key or (key is None and not k.startswith("wait_")) else 1.0),
            "children": scale_scope(v["children"], key, factor),
        }
        for k, v in tree.items()
    }


def slowed_copy(
    src,
    dst,
    factor: float,
    core_wait_share: float = 0.0,
    component: str = "RolloutWorker",
    key: str | None = "env_step",
):
    """The same run with `key` of every `component` (every key when None) taking `factor` times as long, in the series
    and the profile, and, when `core_wait_share` is given, its processes waiting for a core that share of the time more
    (as on a busier machine)."""
    shutil.copytree(src, dst)
    lines = []
    for line in (src / SERIES_FILE).read_text().splitlines():
        record = json.loads(line)
        if record["component"].startswith(component):
            record["tree"] = scale_scope(record["tree"], key, factor)
            if record["run_delay_s"] is not None:
                record["run_delay_s"] += core_wait_share * record["t"]
        lines.append(json.dumps(record))
    (dst / SERIES_FILE).write_text("\n".join(lines) + "\n")
    profile = json.loads((src / "profile.json").read_text())
    for name, entry in profile.items():
        if name.startswith(component):
            entry["tree"] = scale_scope(entry["tree"], key, factor)
    (dst / "profile.json").write_text(json.dumps(profile))
    return dst


def test_a_scope_made_20_percent_slower_is_marked(sleepy_run, tmp_path):
    slow = slowed_copy(sleepy_run, tmp_path / "slow", 1.2)
    result = compare(load_experiment(sleepy_run), load_experiment(slow))
    slowed = {f"RolloutWorker_w{i}/env_step" for i in range(2)}
    assert {r.key for r in result.marked} <= slowed
    rows = [r for r in result.rows if r.key in slowed]
    assert all(r.change == pytest.approx(0.2, rel=1e-6) for r in rows)
    detectable = [r for r in rows if 0.2 > max(Z * r.noise, MIN_CHANGE)]
    if not detectable:
        pytest.skip(f"this machine's run-to-run noise ({min(r.noise for r in rows):.0%}) hides a 20 % change")
    assert all(r.marked for r in detectable)


def test_a_change_the_busier_machine_explains_is_not_marked(sleepy_run, tmp_path):
    """The same 20 % slower env_step, but each rollout worker waited for a core 30 % of the run's time more: the load
    alone could explain a change of that size, so it joins the noise and nothing is marked."""
    busier = slowed_copy(sleepy_run, tmp_path / "busier", 1.2, core_wait_share=0.3)
    base, run = load_experiment(sleepy_run), load_experiment(busier)
    if any(c.run_delay_s is None for c in base.components):
        pytest.skip("no per-process scheduler clocks on this platform")
    result = compare(base, run)
    for worker in ("RolloutWorker_w0", "RolloutWorker_w1"):
        before, after = (next(c for c in e.components if c.name == worker) for e in (base, run))
        # by hand: 1 + core wait per CPU second, before and after; the CPU seconds are the same copy's
        assert after.cpu_s == before.cpu_s
        explained = (after.cpu_s + after.run_delay_s) / (before.cpu_s + before.run_delay_s) - 1
        assert explained > 0.2 / Z  # enough to hide the injected change
        row = next(r for r in result.rows if r.key == f"{worker}/env_step")
        assert row.change == pytest.approx(0.2, rel=1e-6)
        assert row.noise >= explained
    assert result.marked == []


def test_a_process_whose_keys_all_moved_together_is_explained_by_that_move(sleepy_run, tmp_path):
    """Every work key of the inference worker 40 % slower, as scheduling alone moved a process between two runs of one
    command: each key's process column shows the move, and the move explains it."""
    moved = slowed_copy(sleepy_run, tmp_path / "moved", 1.4, component="InferenceWorker", key=None)
    result = compare(load_experiment(sleepy_run), load_experiment(moved))
    rows = [
        r
        for r in result.rows
        if r.key.startswith("InferenceWorker") and r.unit == "s/frame" and "/wait_" not in r.key and r.a
    ]
    assert len(rows) > 5
    assert all(r.change == pytest.approx(0.4, rel=1e-6) and r.process_change == pytest.approx(0.4) for r in rows)
    assert result.marked == []


def test_a_change_within_noise_is_not_marked(sleepy_run, tmp_path):
    slightly = slowed_copy(sleepy_run, tmp_path / "slightly", 1.03)
    assert compare(load_experiment(sleepy_run), load_experiment(slightly)).marked == []


def test_cli_prints_the_diff_and_draws_it(sleepy_run, tmp_path):
    slow = slowed_copy(sleepy_run, tmp_path / "slow", 1.2)
    out = subprocess.run(
        [sys.executable, "-m", "sf.profile", "report", str(slow), "--compare", str(sleepy_run)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    expected = compare(load_experiment(sleepy_run), load_experiment(slow))
    assert f"{len(expected.marked)} of {len(expected.rows)} keys changed beyond run-to-run noise" in out.stdout
    assert "RolloutWorker_w0/env_step" in out.stdout and "+20%" in out.stdout
    assert (slow / "profiling" / "compare.png").read_bytes()[:4] == b"\x89PNG"
    as_json = subprocess.run(
        [sys.executable, "-m", "sf.profile", "report", str(slow), "--compare", str(sleepy_run), "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    data = json.loads(as_json.stdout)
    assert sorted(data["marked"]) == sorted(r.key for r in expected.marked)
    row = next(r for r in data["rows"] if r["key"] == "RolloutWorker_w0/env_step")
    assert row["change"] == pytest.approx(0.2, rel=1e-6)


@pytest.mark.slow
def test_a_real_env_step_made_slower_is_marked(sleepy_run, tmp_path):
    """A 2 ms sleep against 1 ms: env_step per frame grows by 70-100 % (time.sleep overshoots both). The rollout
    workers' other keys may move a lot with it (a process that sleeps longer wakes colder), but a sleep is no CPU time,
    so that move explains little of env_step."""
    slow_case = dataclasses.replace(SLEEPY, flags=("--env=sleepy_cartpole_2000us",) + SLEEPY.flags[1:])
    slow = run_case(slow_case, str(tmp_path), "slow")
    rows = {r.key: r for r in compare(load_experiment(sleepy_run), load_experiment(slow)).rows}
    env_steps = [rows[f"RolloutWorker_w{i}/env_step"] for i in range(2)]
    assert all(r.change > 0.5 and r.marked for r in env_steps), [(r.key, r.change, r.noise) for r in env_steps]


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_runs_of_the_same_command_are_quiet_in_9_of_10(tmp_path):
    runs = [run_case(SLEEPY, str(tmp_path), f"same{i}") for i in range(11)]
    quiet = [not compare(load_experiment(a), load_experiment(b)).marked for a, b in zip(runs, runs[1:])]
    assert sum(quiet) >= 9, quiet


def test_the_diff_leads_with_the_fps_then_the_marked_keys_that_moved_the_most_time():
    """The FPS first, whatever moved; marked keys before the rest, each group by the seconds per frame it moved (a
    key that went from 0.2 to 2 us/frame sorts below one that went from 20 to 30), memory last; values with units."""
    from sf.analysis.compare import Comparison, DiffRow, format_text, ordered

    rows = [
        DiffRow("Learner 0/loop_overhead/serialize", "s/frame", 0.2e-6, 2e-6, 9.0, 0.1, True),
        DiffRow("Learner 0/peak_rss_bytes", "bytes", 300 * 2**20, 450 * 2**20, 0.5, 0.1, True),
        DiffRow("RolloutWorker_w0/env_step", "s/frame", 20e-6, 30e-6, 0.5, 0.1, True),
        DiffRow("RolloutWorker_w0/wait_actions", "s/frame", 5e-6, 50e-6, 9.0, 0.1, False),
        DiffRow("fps", "frames/s", 1000.0, 1410.0, 0.41, 0.25, False, None, 0.2),
    ]
    assert [r.key for r in ordered(rows)] == [
        "fps",
        "RolloutWorker_w0/env_step",
        "Learner 0/loop_overhead/serialize",
        "Learner 0/peak_rss_bytes",
        "RolloutWorker_w0/wait_actions",
    ]
    lines = format_text(Comparison("base", "run", rows)).splitlines()
    assert lines[2] == (
        "FPS: 1,410 frames/s against 1,000 frames/s, +41%: within run-to-run noise (noise 25%, most of it from how "
        "long each run's processes waited for a core; a change counts beyond it above 2x the noise and 15%)"
    )
    assert lines[6].split() == ["fps", "1,000", "frames/s", "1,410", "frames/s", "+41%", "25%"]
    assert lines[7].split() == ["*", "RolloutWorker_w0/env_step", "20", "µs/frame", "30", "µs/frame", "+50%", "10%"]
    assert "300.0 MiB" in lines[9] and "450.0 MiB" in lines[9]


def test_the_diff_chart_skips_keys_only_one_run_has_without_a_warning(tmp_path):
    import warnings

    from sf.analysis.charts import ChangeBar, change_bars

    rows = [ChangeBar("new key", float("inf"), 0.0, True), ChangeBar("env_step", 0.2, 0.05, True)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        change_bars(rows, tmp_path / "compare.png")
    assert (tmp_path / "compare.png").read_bytes()[:4] == b"\x89PNG"


def test_a_small_key_that_grew_many_times_is_listed_not_marked(sleepy_run, tmp_path):
    """A rollout worker's smallest work key grown to 4 % of the worker's time: far beyond its noise, but it costs the
    worker too little to explain a change of the frame rate (as a serial run's `update_model` against a parallel
    run's)."""
    from sf.analysis.compare import MIN_MOVED_SHARE

    worker = next(c for c in load_experiment(sleepy_run).components if c.name == "RolloutWorker_w0")
    work = {k: v["time"] for k, v in worker.tree.items() if not k.startswith("wait_") and v["time"] > 0}
    key = min(work, key=work.get)
    factor = 0.04 / (work[key] / worker.activity.lifetime_s)
    grown = slowed_copy(sleepy_run, tmp_path / "grown", factor, key=key)
    rows = {r.key: r for r in compare(load_experiment(sleepy_run), load_experiment(grown)).rows}
    row = rows[f"RolloutWorker_w0/{key}"]
    assert row.change == pytest.approx(factor - 1, rel=1e-6) and row.change > max(Z * row.noise, MIN_CHANGE)
    assert 0.04 - 0.04 / factor < MIN_MOVED_SHARE and not row.marked
