"""Numbers a user can trust: a component that never ran is named, no share or core count exceeds what the machine
can have, a verdict and its limit give one answer, each FPS says its window, `--compare` never marks a wait, and the
HTML pages are self-contained."""

import json
import re
from pathlib import Path

import pytest

from sf.analysis.advice import advise
from sf.analysis.bottleneck import assess, cpu_by_kind, process_loads
from sf.analysis.cli import run_report
from sf.analysis.compare import compare
from sf.analysis.consistency import check
from sf.analysis.report import build_report, format_text
from sf.analysis.report_html import compare_page
from sf.analysis.run_data import ComponentActivity, Experiment, load_experiment
from sf.profiling.activity import Activity
from sf.utils.roles import Role
from tests.test_profile_report import node, simulation_bound, write_experiment


def activity(name, role, pid, lifetime, tree, cpu=None, wall=None, cores=2):
    work = sum(v["time"] for k, v in tree.items() if not k.startswith("wait_") and k != "loop_overhead")
    waits = {k: v["time"] for k, v in tree.items() if k.startswith("wait_")}
    overhead = tree.get("loop_overhead", {"time": 0.0})["time"]
    return ComponentActivity(
        name,
        pid,
        Role(role),
        Activity(lifetime, work, sum(waits.values()), overhead, waits),
        tree,
        cpu,
        0.0,
        cores,
        True,
        wall,
    )


def test_a_rollout_worker_that_never_ran_is_named(tmp_path):
    """As after a torch-profiler window: one worker's tree holds only `init_envs`, its loop lived 0.019 s."""
    exp_dir = simulation_bound(tmp_path / "sim")
    profile = json.loads((exp_dir / "profile.json").read_text())
    profile["RolloutWorker_w2"] = {
        "name": "RolloutWorker_w2",
        "pid": 20,
        "tree": {"init_envs": node(4.2)},
        "activity": {"lifetime_s": 0.019, "work_s": 4.2, "wait_s": 0.0, "overhead_s": 0.0, "waits": {}},
        "resources": {"wall_s": 20.0, "cpu_user_s": 59.0, "cpu_system_s": 1.0, "peak_rss_bytes": 1},
    }
    (exp_dir / "profile.json").write_text(json.dumps(profile))  # not in the series: whole lifetimes are read
    text = format_text(build_report(load_experiment(exp_dir)))
    assert "RolloutWorker_w2: did no work (its tree holds only init_envs; its loop lived 0.019 s)" in text
    # 60 CPU seconds in 20 s of wall time is 3 cores: more than the machine has, said and clipped
    assert "RolloutWorker_w2: inconsistent data: 3 cores over the window on a 2-core machine" in text
    for cores in re.findall(r"([\d.]+) cores each", text):
        assert float(cores) <= 2.0
    for share in re.findall(r"(\d+)%", text):
        assert int(share) <= 100 or "what if" in text  # what-if gains may exceed 100 %, shares may not


def test_a_loop_is_late_against_the_run_clock_not_its_process_import_and_compile_time():
    """A serial run of 2.3 s on the runner's clock in a process that lived 19.6 s (the interpreter, torch and a first
    compile of the numba kernels before the clock started): its loops, 1.8 s each, started on time. The same loops in a
    run of 5 s did not."""
    tree = {"train": node(1.0), "wait_batch": node(0.8)}
    life = Activity(1.8, 1.0, 0.8, 0.0, {"wait_batch": 0.8})
    learner = ComponentActivity("Learner 0", 1, Role.LEARNER, life, tree, 13.9, None, 2, False, 19.6)
    on_time = Experiment(Path("."), [learner], {"wall_time_s": 2.3}, {}, frames=50176, fps=21000.0)
    assert [f.line() for f in check(on_time) if "started late" in f.message] == []
    late = Experiment(Path("."), [learner], {"wall_time_s": 5.0}, {}, frames=50176, fps=10000.0)
    assert [f.line() for f in check(late) if "started late" in f.message] == [
        "Learner 0: its loop lived 1.8 s of 5 s: it started late or stalled, its shares cover only that time"
    ]


def test_cpu_seconds_over_a_loop_that_did_not_live_the_window_are_clipped_to_the_cores():
    """59.9 CPU seconds over 2 s of wall time claim 29.95 cores on a 2-core machine: shown as 2, and said. A worker
    that never ran is left out of the model."""
    busy = {"env_step": node(1.0), "wait_actions": node(1.0)}
    claims = activity("RolloutWorker_w0", "RolloutWorker", 7, 2.0, busy, 59.9, 2.0)
    never = activity("RolloutWorker_w1", "RolloutWorker", 9, 0.019, {"init_envs": node(0.019)}, 0.1, 2.0)
    other = activity("Learner 0", "Learner", 8, 2.0, {"train": node(1.0), "wait_batch": node(1.0)}, 1.0, 2.0)
    exp = Experiment(Path("."), [claims, never, other], {}, {}, frames=1000, fps=500.0)
    loads = {load.label: load for load in process_loads(exp)}
    assert loads["RolloutWorker"].count == 1 and loads["RolloutWorker"].cpu == 2.0
    lines = [f.line() for f in check(exp)]
    assert any(line.startswith("RolloutWorker_w1: did no work") for line in lines)
    assert "RolloutWorker_w0: inconsistent data: 29.9 cores over the window on a 2-core machine; shown as 2" in lines


def test_a_learner_that_waited_all_of_a_window_is_idle_there_not_missing():
    """A population's learner gets a batch every few seconds: over a 4 s window of the progress line it may only have
    waited, which is not a learner that never ran. Over a whole run, waiting for work that never came is said."""
    waited = {"train": node(0.0), "wait_batch": node(4.0)}
    busy = {"env_step": node(3.0), "wait_actions": node(1.0)}
    whole_run = ["Learner 1: did no work: its loop waited 4 s for work that never came"]
    for steady, expected in ((True, []), (False, whole_run)):
        learner = activity("Learner 1", "Learner", 8, 4.04, waited, 0.1, 4.04)
        learner.steady = steady
        worker = activity("RolloutWorker_w0", "RolloutWorker", 7, 4.04, busy, 3.0, 4.04)
        exp = Experiment(Path("."), [worker, learner], {"wall_time_s": 4.04}, {}, frames=4000, fps=1000.0)
        assert [f.line() for f in check(exp) if f.component == "Learner 1"] == expected


def test_a_verdict_limited_by_the_cores_names_the_kind_that_uses_most_of_them():
    """Two rollout workers at 0.4 cores each (simulation 0.64 of them), inference 0.9, the learner 0.14: 1.84 of 2
    cores in use, a demand of 0.92 above any process's busy share (0.6), so the cores limit the rate; inference uses
    the most of them, and the verdict, headline and explanation all say so."""
    rollout = {"env_step": node(0.8), "enqueue_policy_requests": node(0.2), "wait_actions": node(1.0)}
    components = [
        activity("RolloutWorker_w0", "RolloutWorker", 1, 2.0, rollout, 0.8, 2.0),
        activity("RolloutWorker_w1", "RolloutWorker", 2, 2.0, rollout, 0.8, 2.0),
        activity("InferenceWorker_p0-w0", "InferenceWorker", 3, 2.0, {"one_step": node(1.2)}, 1.8, 2.0),
        activity("Learner 0", "Learner", 4, 2.0, {"train": node(0.4), "wait_batch": node(1.6)}, 0.28, 2.0),
    ]
    exp = Experiment(Path("."), components, {}, {}, frames=1000, fps=500.0)
    verdict = assess(exp)
    assert verdict.limiting == "all 2 cores"
    by_kind = cpu_by_kind(process_loads(exp))
    assert by_kind == pytest.approx({"simulation": 0.64, "communication": 0.16, "inference": 0.9, "learner": 0.14})
    assert verdict.kind == "inference"
    assert verdict.explanation.startswith("the machine's 2 cores (1.84 in use, 92%)")
    assert "inference work uses the most of them (0.90 cores)" in verdict.explanation
    assert advise(exp).headline() == "inference-bound, cores 92 %"
    assert check(exp) == []


def test_cores_the_processes_together_cannot_have_are_said_and_clipped():
    busy = {"env_step": node(1.5), "wait_actions": node(0.5)}
    components = [activity(f"RolloutWorker_w{i}", "RolloutWorker", i, 2.0, busy, 2.6, 2.0) for i in range(2)]
    exp = Experiment(Path("."), components, {}, {}, frames=1000, fps=500.0)
    assert [f.line() for f in check(exp)] == [
        "all processes: inconsistent data: 2.60 cores in use on a 2-core machine (each process's CPU is read when "
        "its snapshot arrives, and a busy machine delays some); counted as 2"
    ]
    evidence = assess(exp).evidence[-1]
    assert evidence == "CPU: 2.00 of 2 cores in use (100%); 2.60 measured, more than the machine has"


def test_a_verdict_limited_by_a_group_names_that_group_and_its_share_of_the_kind(tmp_path):
    report = build_report(load_experiment(simulation_bound(tmp_path / "sim")))
    assert report.verdict.explanation == (
        "RolloutWorker (busy 90% of its time, simulation 80%): the others wait for it"
    )
    assert report.headline == "simulation-bound 90 %"


def test_each_fps_figure_names_its_window(tmp_path):
    text = format_text(build_report(load_experiment(simulation_bound(tmp_path / "sim"))))
    assert "window: steady state, 5.0 s to 15.0 s" in text
    assert re.search(r"1,000  this report: 5\.0 s to 15\.0 s of the run, between periodic snapshots", text)
    assert "from the first trained batch to the end (summary.json fps_steady)" in text
    assert "the whole session, start-up included (summary.json fps; the Collected line)" in text


def test_compare_never_marks_a_wait_even_one_only_a_run_has(tmp_path):
    """A synchronous baseline waits for policy versions, the asynchronous run does not: the key exists in one run
    only. It is listed, not marked; a work key only one run has still is."""
    base_tree = {"env_step": node(5.0), "wait_policy_version": node(4.0), "wait_actions": node(1.0)}
    run_tree = {"env_step": node(5.0), "new_work": node(2.0), "wait_actions": node(3.0)}
    base = write_experiment(tmp_path / "base", {"RolloutWorker_w0": (1, base_tree)})
    run = write_experiment(tmp_path / "run", {"RolloutWorker_w0": (1, run_tree)})
    result = compare(load_experiment(base), load_experiment(run))
    rows = {r.key: r for r in result.rows}
    assert rows["RolloutWorker_w0/wait_policy_version"].b is None
    assert not rows["RolloutWorker_w0/wait_policy_version"].marked
    assert rows["RolloutWorker_w0/new_work"].marked
    assert [r.key for r in result.marked] == ["RolloutWorker_w0/new_work"]


def _self_contained(page: str) -> None:
    assert "<script src" not in page and "<link" not in page
    assert not re.search(r'(src|href)="(https?:)?//', page)


def test_report_page_is_one_self_contained_file_with_the_answer_first(tmp_path):
    exp_dir = simulation_bound(tmp_path / "sim")
    (exp_dir / "config.json").write_text(json.dumps({"num_workers": 2, "num_envs_per_worker": 8}))
    run_report(exp_dir)
    page = (exp_dir / "profiling" / "report.html").read_text()
    _self_contained(page)
    assert page.index("simulation-bound 90 %") < page.index("<h2>Components</h2>")
    assert page.count('class="sortable"') >= 3 and "<svg" in page
    assert "--num_workers=" in page and 'href="../profile.json"' in page
    for name in ("RolloutWorker_w0", "InferenceWorker_p0-w0", "Learner 0", "Batcher 0"):
        assert "<details><summary>" in page and name in page


def test_compare_page_is_self_contained_and_lists_the_marked_keys(tmp_path):
    base = write_experiment(tmp_path / "base", {"RolloutWorker_w0": (1, {"env_step": node(5.0)})})
    run = write_experiment(tmp_path / "run", {"RolloutWorker_w0": (1, {"env_step": node(8.0)})})
    a, b = load_experiment(base), load_experiment(run)
    page = compare_page(compare(a, b), b, a)
    _self_contained(page)
    assert "1 of " in page and "<code>RolloutWorker_w0/env_step</code> +60%" in page and "<svg" in page


@pytest.mark.parametrize("seconds", [0.0])
def test_a_window_with_no_life_shows_no_share(seconds):
    """A component whose loop did not live in the window has no shares to show, not a division by zero."""
    c = activity("Learner 0", "Learner", 1, seconds, {"train": node(0.0)})
    assert c.activity.share(1.0) == 0.0


def test_the_cpu_line_says_how_many_cores_other_programs_kept_busy():
    """A run whose processes used 1.2 of 2 cores while the machine was busy on both: the 0.8 taken by other programs
    is why its processes waited for a core, and the verdict's CPU line says so."""
    busy = {"env_step": node(1.2), "wait_actions": node(0.8)}
    components = [activity("RolloutWorker_w0", "RolloutWorker", 1, 2.0, busy, 2.4, 2.0)]
    shared = Experiment(Path("."), components, {}, {}, frames=1000, fps=500.0, machine_cores=2.0)
    assert assess(shared).evidence[-1] == "CPU: 1.20 of 2 cores in use (60%); other programs kept 0.80 busy"
    alone = Experiment(Path("."), components, {}, {}, frames=1000, fps=500.0, machine_cores=1.22)
    assert assess(alone).evidence[-1] == "CPU: 1.20 of 2 cores in use (60%)"
