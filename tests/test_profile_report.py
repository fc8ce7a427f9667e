"""`python -m sf.profile report`: the verdict on runs built to be limited by one kind of work, the what-if arithmetic
on a hand-made experiment, and the outputs (text, JSON, HTML with inline charts, PNGs)."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sf.analysis.bottleneck import assess, predict_fps, process_loads
from sf.analysis.run_data import ComponentActivity, Experiment, load_experiment
from sf.profiling.activity import Activity
from sf.profiling.series import SERIES_FILE
from sf_examples.profiling.induced_bottlenecks import CASES, run_case
from tests.conftest import ROOT

# the runs of conftest's session fixtures: built once, by the one pytest-xdist worker that runs every test reading them
pytestmark = pytest.mark.xdist_group("shared_runs")


def node(seconds, **children):
    return {"time": seconds, "children": children}


def write_experiment(path, trees_at, fps=1000.0):
    """An experiment folder whose series holds two snapshots per component, 10 s apart, 10 s * fps frames apart.

    trees_at: {component: (pid, tree of what happened in the window)}; the first snapshot is an empty tree.
    """
    path.mkdir(parents=True)
    (path / "profiling").mkdir()
    lines, profile = [], {}
    for name, (pid, tree) in trees_at.items():
        for t, frames, snapshot in ((5.0, 1000, {}), (15.0, 1000 + int(10 * fps), tree)):
            lines.append(
                (
                    t,
                    json.dumps(
                        {
                            "t": t,
                            "frames": frames,
                            "component": name,
                            "pid": pid,
                            "final": False,
                            "cpu_s": None,
                            "run_delay_s": None,
                            "cores": 2,
                            "tree": snapshot,
                        }
                    ),
                )
            )
        profile[name] = {"name": name, "pid": pid, "tree": tree}
    (path / SERIES_FILE).write_text("\n".join(line for _, line in sorted(lines, key=lambda kv: kv[0])) + "\n")
    (path / "profile.json").write_text(json.dumps(profile))
    (path / "summary.json").write_text(
        json.dumps({"fps": fps, "fps_steady": fps, "wall_time_s": 20.0, "env_frames": {"0": 1000 + int(10 * fps)}})
    )
    return path


def simulation_bound(path):
    """Rollout workers busy 9 of 10 s (8 s env_step, 1 s framework), inference 3 s, learner 2 s, batcher 0.5 s."""
    rollout = {
        "env_step": node(8.0),
        "overhead": node(0.6),
        "enqueue_policy_requests": node(0.4),
        "wait_actions": node(1.0),
    }
    return write_experiment(
        path,
        {
            "RolloutWorker_w0": (10, rollout),
            "RolloutWorker_w1": (11, rollout),
            "InferenceWorker_p0-w0": (
                12,
                {"one_step": node(3.0, forward=node(2.0), send_messages=node(0.5)), "wait_requests": node(7.0)},
            ),
            "Learner 0": (13, {"train": node(2.0), "wait_batch": node(7.5)}),
            "Batcher 0": (13, {"batching": node(0.5)}),
        },
    )


def test_verdict_and_what_if_follow_the_bottleneck_model(tmp_path):
    exp = load_experiment(simulation_bound(tmp_path / "sim"))
    verdict = assess(exp)
    assert verdict.kind == "simulation"
    assert verdict.limiting == "RolloutWorker"
    gains = {w.kind: w.fps_gain for w in verdict.what_if}
    # by hand: rollout workers busy 0.9; env_step halved -> 0.5; the next busiest process is learner+batcher at 0.25
    assert gains["simulation"] == pytest.approx(0.9 / 0.5 - 1)
    # framework code of the rollout workers (1.0 s) plus the inference worker's sends (0.5 s), halved
    assert gains["communication"] == pytest.approx(0.9 / 0.85 - 1)
    assert gains["learner"] == pytest.approx(0.0)
    assert predict_fps(exp, {"simulation": 4.0}) == pytest.approx(1000 * 0.9 / max(0.1 + 0.2, 0.3))
    # env_step 4x and the learner 2x slower: rollout 0.3, learner+batcher 0.45 -> limited by the learner
    assert predict_fps(exp, {"simulation": 4.0, "learner": 0.5}) == pytest.approx(1000 * 0.9 / 0.45)
    # a speed-up for one group only: the rollout workers' framework code 2x (0.1 -> 0.05) with env_step 4x leaves
    # rollout 0.25 and the inference worker at 0.3 (its sends untouched); the same 2x for every group's
    # communication would also halve those sends (0.05 -> 0.025) and leave the inference worker at 0.275
    assert predict_fps(exp, {"simulation": 4.0, ("RolloutWorker", "communication"): 2.0}) == pytest.approx(
        1000 * 0.9 / 0.3
    )
    assert predict_fps(exp, {"simulation": 4.0, "communication": 2.0}) == pytest.approx(1000 * 0.9 / 0.275)


def test_waits_name_whom_each_component_waits_for(tmp_path):
    from sf.analysis.report import build_report, format_text

    report = build_report(load_experiment(simulation_bound(tmp_path / "sim")))
    text = format_text(report)
    assert "InferenceWorker idle 70%, waiting for rollout workers (wait_requests)" in text
    assert "RolloutWorker (x2) idle 10%, waiting for inference workers (wait_actions)" in text
    rows = {r.name: r for r in report.components}
    assert rows["RolloutWorker_w0"].work == pytest.approx(0.9)
    assert rows["RolloutWorker_w0"].hotspots[0] == ("env_step", pytest.approx(0.8))
    assert "verdict: simulation-bound" in text
    assert "if simulation were 2x faster: about +80% FPS" in text


def test_cli_writes_html_pngs_and_json(tmp_path):
    exp = simulation_bound(tmp_path / "sim")
    out = subprocess.run(
        [sys.executable, "-m", "sf.profile", "report", str(exp), "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["verdict"]["kind"] == "simulation"
    page = (exp / "profiling" / "report.html").read_text()
    assert "verdict: simulation-bound" in page and "<svg" in page
    png = (exp / "profiling" / "report_activity.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert (exp / "profiling" / "report_hotspots.png").read_bytes()[:4] == b"\x89PNG"
    # JSON on stdout stays JSON; what was written is said on stderr
    assert out.stderr.strip().splitlines() == [
        f"wrote {exp / 'profiling' / 'report.html'} (open it in a browser) and report_activity.png, "
        "report_hotspots.png beside it"
    ]


def test_the_text_report_ends_saying_what_it_wrote(tmp_path, capsys):
    from sf.analysis.cli import main

    exp = simulation_bound(tmp_path / "sim")
    assert main([str(exp)]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == f"wrote {exp / 'profiling' / 'report.html'} (open it in a browser) and report_activity.png, " + (
        "report_hotspots.png beside it"
    )
    assert (exp / "profiling" / "report.html").exists() and (exp / "profiling" / "report_hotspots.png").exists()


def test_cli_rejects_a_folder_without_a_profile(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "sf.profile", "report", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert "experiment_dir" in out.stderr


def test_whole_lifetime_fallback_without_series(tmp_path):
    """A profile without the series (an older run) is read over each component's whole life."""
    exp_dir = simulation_bound(tmp_path / "sim")
    (exp_dir / SERIES_FILE).unlink()
    exp = load_experiment(exp_dir)
    rollout = next(c for c in exp.components if c.name == "RolloutWorker_w0")
    assert not rollout.steady and rollout.activity.lifetime_s == 20.0
    assert rollout.activity.share(rollout.activity.work_s) == pytest.approx(0.45)


def test_induced_simulation_bottleneck_gets_its_verdict(sleepy_run):
    assert assess(load_experiment(sleepy_run)).kind == "simulation"


@pytest.mark.slow
def test_induced_communication_bottleneck_gets_its_verdict(tmp_path):
    exp = run_case(CASES["communication"], str(tmp_path), "communication")
    assert assess(load_experiment(exp)).kind == "communication"
    shutil.rmtree(tmp_path / "communication")


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["inference", "learner"])
def test_induced_bottleneck_gets_its_verdict_slow(kind, tmp_path):
    exp = run_case(CASES[kind], str(tmp_path), kind)
    assert assess(load_experiment(exp)).kind == kind


def _snapshot(t: float, frames: int, final: bool = False):
    from sf.profiling.series import Snapshot

    return Snapshot(
        t=t, frames=frames, pid=1, final=final, cpu_s=None, run_delay_s=None, cores=2, tree={}, lifetime_s=t
    )


def test_steady_window_needs_a_quarter_of_the_run():
    """A 10-second run reports once at 10.00 s and ends at 10.04 s: that pair is no steady state, the whole life
    is used; two reports 5 s apart in a 12-s run are."""
    from sf.analysis.run_data import steady_window

    short = [_snapshot(0.5, 0), _snapshot(10.0, 36_864), _snapshot(10.04, 40_960, final=True)]
    assert steady_window(short) is None
    long = [_snapshot(0.5, 0), _snapshot(5.0, 20_000), _snapshot(10.0, 40_000), _snapshot(12.0, 48_000, final=True)]
    first, last = steady_window(long)
    assert (first.t, last.t) == (5.0, 10.0)


def test_a_process_hosting_two_components_counts_its_loop_overhead_once():
    loop = {"loop_overhead": {"time": 1.0, "children": {"serialize": {"time": 1.0, "children": {}}}}}
    rollout = {"env_step": {"time": 3.0, "children": {}}, "wait_actions": {"time": 5.0, "children": {}}, **loop}
    inference = {"one_step": {"time": 4.0, "children": {}}, "wait_requests": {"time": 4.0, "children": {}}, **loop}
    components = [
        ComponentActivity(name, 7, role, Activity(10.0, work, 10.0 - work - 1.0, 1.0, {}), tree)
        for name, role, work, tree in (
            ("RolloutWorker_w0", "RolloutWorker", 3.0, rollout),
            ("InferenceWorker_p0-w0", "InferenceWorker", 4.0, inference),
        )
    ]
    (load,) = process_loads(Experiment(Path("."), components, {}, {}))
    assert load.label == "InferenceWorker + RolloutWorker"
    assert load.busy == pytest.approx({"simulation": 0.3, "inference": 0.4, "communication": 0.1})


def test_a_wait_on_a_component_of_the_same_process_says_so():
    from sf.analysis.report import wait_lines

    def component(name, role, pid, wait_key):
        return ComponentActivity(name, pid, role, Activity(10.0, 4.0, 5.0, 1.0, {wait_key: 5.0}), {})

    colocated = [
        component("RolloutWorker_w0", "RolloutWorker", 7, "wait_actions"),
        component("InferenceWorker_p0-w0", "InferenceWorker", 7, "wait_requests"),
    ]
    assert {w.role: w.waiting_for for w in wait_lines(colocated)} == {
        "RolloutWorker": "inference workers, in its own process",
        "InferenceWorker": "rollout workers, in its own process",
    }
    apart = [
        component("RolloutWorker_w0", "RolloutWorker", 7, "wait_actions"),
        component("InferenceWorker_p0-w0", "InferenceWorker", 8, "wait_requests"),
    ]
    assert {w.waiting_for for w in wait_lines(apart)} == {"inference workers", "rollout workers"}


def test_the_frame_rate_chart_of_a_run_shorter_than_one_span_has_a_point(tmp_path):
    """Snapshots 1.5 s apart over 3 s, under the 5 s each point spans: one rate over the whole window, drawn as a level
    line across it (the axis from 1.0 s to 4.0 s), so the panel draws what the busy-share panel beside it draws from
    instead of saying there is nothing or drawing one dot."""
    from sf.analysis.report_html import line_chart, over_time
    from sf.analysis.run_data import Experiment
    from sf.profiling.series import Snapshot

    tree = {"train": node(0.5), "wait_batch": node(0.5)}
    snaps = [
        Snapshot(t, frames, 1, final, 1.0, 0.0, 2, tree, lifetime)
        for t, frames, final, lifetime in ((1.0, 1000, False, 1.0), (2.5, 4000, False, 2.5), (4.0, 7000, True, 4.0))
    ]
    experiment = Experiment(tmp_path, [], {}, {}, {"Learner 0": snaps})
    fps, _ = over_time(experiment)
    assert fps == {"frames per second (1.0 s to 4.0 s)": [(1.0, 2000.0), (4.0, 2000.0)]}
    chart = line_chart("Frame rate over the run", fps, "frames/s")
    axis = re.findall(r'text-anchor="middle">([\d.]+) s<', chart)
    assert axis == ["1.0", "1.8", "2.5", "3.2", "4.0"] and chart.count("<circle") == 2


def test_the_pngs_draw_in_the_colours_of_the_page(tmp_path):
    """report_activity.png's work, wait and loop-overhead bars in the colours the page's bars and legend use."""
    import matplotlib.image

    from sf.analysis.charts import ActivityBar, activity_bars
    from sf.analysis.report_html import legend

    path = activity_bars([ActivityBar("Learner 0", 0.5, 0.3, 0.2)], "verdict: learner-bound", tmp_path / "a.png")
    pixels = {tuple(int(round(255 * c)) for c in px[:3]) for row in matplotlib.image.imread(path) for px in row}
    for colour in re.findall(r"background:(#[0-9a-f]{6})", legend()):
        rgb = tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))
        assert rgb in pixels, colour


def test_the_headline_of_a_run_is_not_drawn_as_an_alarm():
    """Every run is bound by something: the verdict is news, not an error, so it takes the page's text colour (the
    "Check these first" box carries the warnings)."""
    from sf.analysis.report_html import CSS

    rule = re.search(r"\.verdict \{([^}]*)\}", CSS).group(1)
    assert "color: var(--fg)" in rule and "#cf222e" not in rule
