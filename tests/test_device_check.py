"""The device check (`python -m sf.bench.device_check`): its pieces against values worked out by hand, and the whole
command on the CPU (`--device=cpu`, tiny serial CartPole runs, no Sample Factory), every step but the CUDA figures."""

import json
import signal
import time

import psutil
import pytest
from conftest import run_sf, shm_leaked, start_sf

from sf.analysis.torch_trace import busy_s, nvml_busy_s, summarize
from sf.bench.device_check import main
from sf.bench.device_profile import breakdown_figures, explain
from sf.bench.device_summary import SummaryFile, markdown, targets
from sf.bench.runs import merge_flags
from sf.bench.timed import steady_fps, window_closed

LINES = [(0.4, 0), (5.0, 1000), (10.0, 6000), (15.0, 11000), (20.0, 17000)]  # (s, frames): a line every 5 s


def test_steady_fps_between_the_lines_nearest_the_window_ends():
    # window [10, 15] after the first frames at 5 s: exactly the lines at 10 and 15
    assert steady_fps(LINES, 5.0, 5.0) == (pytest.approx(1000.0), (10.0, 15.0))
    # window [7, 13]: the lines nearest its ends are at 5 and 15
    assert steady_fps(LINES, 2.0, 6.0) == (pytest.approx(10000 / 10), (5.0, 15.0))
    # window [10.02, 15.02] (lines come a little more than 5 s apart): the lines at 10 and 15, not one period early
    assert steady_fps(LINES, 5.02, 5.0) == (pytest.approx(1000.0), (10.0, 15.0))
    # window [15, 35] that the run never reached the end of: its last line closes the interval
    assert steady_fps(LINES, 10.0, 20.0) == (pytest.approx(6000 / 5), (15.0, 20.0))
    # a run that ended 1.5 s after its first frames, long before its window: the rate over what it ran
    assert steady_fps([(5.0, 1000), (6.5, 2500)], 5.0, 10.0) == (pytest.approx(1000.0), (5.0, 6.5))
    assert steady_fps(LINES[:2], 0.0, 5.0) is None  # one line counting frames: no rate
    assert steady_fps([(5.0, 0), (10.0, 0)], 0.0, 1.0) is None
    assert window_closed(LINES, 5.0, 10.0) and not window_closed(LINES, 5.0, 10.5)


def test_merge_flags_keeps_the_last_setting_of_each_flag_once():
    base = ["--env=CartPole-v1", "--encoder_mlp_layers", "64", "64", "--device=cpu", "--num_workers=4"]
    merged = merge_flags(base, ["--device=gpu", "--encoder_mlp_layers", "32", "--num_workers=2", "--num_workers=8"])
    assert merged == ["--env=CartPole-v1", "--device=gpu", "--encoder_mlp_layers", "32", "--num_workers=8"]
    assert merge_flags(["sf_examples.x", "--a=1"], ["--b", "-1"]) == ["sf_examples.x", "--a=1", "--b", "-1"]


BASE_NS = 1_800_000_000 * 10**9


def _event(cat, name, ts, dur, pid=1, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def test_kernels_are_charged_to_the_scope_that_launched_them():
    """Kernels run after their launch returns: each goes to the innermost Timing range open at its launch on the
    launching thread, not to whatever range is open on the CPU while it runs."""
    doc = {
        "baseTimeNanoseconds": BASE_NS,
        "traceEvents": [
            _event("user_annotation", "ProfilerStep#1", 0, 300),  # torch's own range: not a Timing key
            _event("user_annotation", "learner/train", 0, 100),
            _event("user_annotation", "learner/train/update", 10, 40),
            _event("user_annotation", "inference_worker/one_step", 0, 300, tid=2),  # another thread's range
            _event("cuda_runtime", "cudaLaunchKernel", 20, 2, correlation=7),  # inside update
            _event("cuda_runtime", "cudaLaunchKernel", 60, 2, correlation=8),  # inside train, after update
            _event("cuda_driver", "cuLaunchKernel", 150, 2, correlation=9),  # under no range of its thread
            _event("kernel", "gemm", 30, 50, pid=0, tid=7, correlation=7),
            _event("kernel", "elementwise", 70, 20, pid=0, tid=8, correlation=8),  # overlaps gemm: busy 30..90
            _event("kernel", "reduce", 200, 10, pid=0, tid=7, correlation=9),
            _event("gpu_memcpy", "Memcpy DtoH", 220, 5, pid=0, tid=7, correlation=10),
        ],
    }
    trace = summarize(doc)
    update, train = trace.keys["learner/train/update"], trace.keys["learner/train"]
    assert update.kernel_self_s == pytest.approx(50e-6) and update.kernels == 1
    assert train.kernel_self_s == pytest.approx(20e-6) and train.kernel_s == pytest.approx(70e-6)
    assert (train.calls, train.cpu_s, update.cpu_s) == (1, pytest.approx(100e-6), pytest.approx(40e-6))
    assert trace.keys["inference_worker/one_step"].kernel_s == 0.0
    assert "ProfilerStep#1" not in trace.keys
    assert trace.unattributed_kernel_s == pytest.approx(10e-6)
    assert (trace.kernels, trace.kernel_s, trace.copy_s) == (3, pytest.approx(80e-6), pytest.approx(5e-6))
    assert trace.busy == [(BASE_NS + 30_000, BASE_NS + 90_000), (BASE_NS + 200_000, BASE_NS + 210_000)]
    assert (trace.start_ns, trace.end_ns, trace.pids) == (BASE_NS, BASE_NS + 300_000, [1])
    assert busy_s(trace.busy, BASE_NS + 50_000, BASE_NS + 205_000) == pytest.approx(45e-6)  # 50..90 and 200..205
    assert trace.to_dict()["gpu_busy_s"] == pytest.approx(70e-6)


def test_nvml_utilization_integrated_over_its_sample_periods():
    samples = [(1000, 0.5), (2000, 1.0), (3000, 0.0)]  # each stands for the period since the previous one
    assert nvml_busy_s(samples, 1500, 2500) == pytest.approx(500 * 1.0 / 1e9)
    assert nvml_busy_s(samples, 0, 1000) == pytest.approx(1000 * 0.5 / 1e9)  # the first: as long as the second
    assert nvml_busy_s(samples, 0, 3000) == pytest.approx((1000 * 0.5 + 1000 * 1.0) / 1e9)
    assert nvml_busy_s(samples[:1], 0, 3000) is None
    assert nvml_busy_s(samples, 5000, 6000) is None


def test_explanation_names_the_side_that_reads_higher():
    busy = [(0, 1000), (10_000, 11_000)]  # two stretches of 1 us, 2 us in all
    higher = explain(0.1, 2e-6, 0.09, busy)
    assert "2 stretches (20 a second, 1.0 us on average): 0% of the 0.10 s by the traces, 90% by NVML" in higher
    assert "NVML reads higher" in higher and "NVML reads lower" in explain(0.1, 0.05, 0.04, busy)
    assert explain(0.1, 0.0, None, busy).startswith("No NVML samples")
    assert explain(0.1, 0.0, 0.05, []) == "The traces hold no kernels in this interval."


def _run(fps, fps_whole_run=None):
    return {"fps": fps, "fps_whole_run": fps_whole_run, "status": "measured", "measured_s": [10.0, 20.0]}


def _summary(tmp_path):
    settings = {
        "device": "gpu",
        "scaling_suite": "doom",
        "scaling_window": {"warmup_s": 5.0, "length_s": 10.0},
        "commands": {"scaling": "python -m x", "benchmark": "python -m y"},
    }
    summary = SummaryFile(tmp_path, {"gpu": "H", "driver": "1", "cpu": "C", "cores": 16}, settings)
    summary.put("ceiling", "doom", {"fps": 7000.0})
    summary.put("scaling", "2", {"workers": 2, "sf": _run(1000.0), "sample_factory": _run(600.0)})
    # 4 workers: below 0.8 x 4/2 x 1000 = 1600 and named learner-bound by the report
    summary.put(
        "scaling", "4", {"workers": 4, "sf": _run(1500.0), "sample_factory": _run(1100.0), "sf_verdict": "learner"}
    )
    # 8 workers: 0.8 x 8/2 x 1000 = 3200, reached
    summary.put("scaling", "8", {"workers": 8, "sf": _run(3300.0), "sample_factory": _run(None, 2000.0)})
    # 16 workers: short of 0.8 x 16/2 x 1000 = 6400, but at 86 % of the ceiling, so bounded by it
    summary.put("scaling", "16", {"workers": 16, "sf": _run(6000.0), "sf_verdict": "simulation"})
    summary.put("breakdown", None, {"status": "ok", "corrected_vs_uninstrumented": -0.031})
    return summary


def test_targets_against_their_bars(tmp_path):
    found = {t.name: t for t in targets(_summary(tmp_path).data)}
    ratio = {k: found[f"sf / Sample Factory, {k} workers"] for k in (2, 4, 8, 16)}
    assert (ratio[2].measured, ratio[2].verdict) == ("1.67x", "met")
    assert (ratio[4].measured, ratio[4].verdict) == ("1.36x", "short")
    assert (ratio[8].measured, ratio[8].verdict) == ("1.65x", "met") and "whole-run" in ratio[8].why
    assert ratio[16].verdict == "not measured"
    scaling = {k: found[f"sf scaling, {k} workers"] for k in (4, 8, 16)}
    assert scaling[4].verdict == "bounded: learner" and "1,600 FPS" in scaling[4].bar
    assert scaling[8].verdict == "met"
    assert scaling[16].verdict == "bounded: simulator ceiling" and "86% of the ceiling" in scaling[16].measured
    breakdown = found["breakdown: corrected total against the uninstrumented run"]
    assert (breakdown.measured, breakdown.verdict) == ("-3.1%", "met")


def test_summary_is_on_disk_after_every_result(tmp_path):
    summary = _summary(tmp_path)
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk["scaling"]["16"]["sf"]["fps"] == 6000.0 and on_disk["status"] == "running"
    text = (tmp_path / "summary.md").read_text()
    assert text == markdown(on_disk)
    assert "| 8 | 3,300 | 2,000 (whole run) | 1.65x | 47% | 29% | - |" in text
    assert "| sf scaling, 4 workers | >= 0.8 x 4/2 x 1,000 = 1,600 FPS |" in text
    summary.finish("done", 12.0)
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "done"
    assert not list(tmp_path.glob("*.tmp"))


def test_breakdown_figures_sum_each_layer_over_the_rows():
    doc = {
        "layers": ["simulator", "python", "cuda_api", "gpu"],
        "rows": {
            "a": {"simulator": 1.0, "python": 0.5, "cuda_api": 0.25, "gpu": 2.0},
            "b": {"simulator": 0.5, "python": 0.5, "cuda_api": 0.0, "gpu": 1.0},
        },
        "corrected_vs_uninstrumented": 0.02,
        "kernel_busy_s": 4.0,
    }
    figures = breakdown_figures(doc)
    assert figures["layers_s"] == {"simulator": 1.5, "python": 1.0, "cuda_api": 0.25, "gpu": 3.0}
    assert (figures["corrected_vs_uninstrumented"], figures["kernel_busy_s"], figures["nvml_busy_s"]) == (
        0.02,
        4.0,
        None,
    )


def test_bad_arguments_stop_with_one_line_before_anything_starts(tmp_path, capsys):
    out = tmp_path / "check"
    assert main(["--out", str(out), "--device=cpu", "--", "--num_workers=-3"]) == 2
    assert "num_workers" in capsys.readouterr().err and not out.exists()
    assert main(["--out", str(out), "--device=cpu", "--profile_steps", "5", "2"]) == 2
    assert "--profile_steps" in capsys.readouterr().err
    out.mkdir()
    (out / "summary.json").write_text("{}")
    assert main(["--out", str(out), "--device=cpu"]) == 2
    assert "already holds a device check" in capsys.readouterr().err


EVERY_STEP = ("ceiling", "scaling", "benchmark", "profile", "breakdown")


@pytest.mark.parametrize(
    "steps",
    [
        # a training run measured, and one profiled: what the GPU check adds to the tools tested on their own
        pytest.param(("scaling", "profile"), marks=pytest.mark.slow),
        pytest.param(EVERY_STEP, marks=pytest.mark.slow),
    ],
    ids=["scaling_and_profile", "every_step"],
)
def test_cpu_check_runs_its_steps(tmp_path, shm_before, steps):
    """The command as on a machine without a GPU, at the smallest sizes: serial CartPole runs that end by themselves
    after a few batches (so their figures are whole-run ones), a profile window of learner iterations 1-2, a
    breakdown of 512 frames."""
    out = tmp_path / "check"
    args = [
        *("--out", str(out), "--device=cpu", "--workers", "2", "--steps", *steps),
        *("--scaling_suite", "cartpole", "--benchmark_suite", "cartpole", "--ceiling_s", "0.3"),
        *("--profile_steps", "1", "2", "--breakdown_frames", "512", "--calibration_pairs", "0"),
        *("--", "--serial_mode=True", "--num_envs_per_worker=2", "--batch_size=256", "--train_for_env_steps=1024"),
    ]
    proc = run_sf(args, module="sf.bench.device_check", timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "done" and not summary["notes"]
    assert summary["machine"]["cores"] and summary["machine"]["gpu"] is None
    assert list(summary["step_s"]) == list(steps)
    text = (out / "summary.md").read_text()
    assert "## Targets" in text and "## Scaling" in text
    point = summary["scaling"]["2"]
    assert point["sf"]["frames"] == 1024 and point["sf"]["fps_whole_run"] > 0 and "sample_factory" not in point
    assert point["sf_verdict"] is not None

    profile = summary["gpu_profile"]
    assert profile["status"] == "ok" and profile["nvml_samples"] == 0
    ((name, process),) = profile["processes"].items()
    assert name == "serial" and process["kernels"] == 0 and "### serial" in text
    # learner iterations 1 and 2: the learner's train scope ran twice inside the window
    assert process["keys"]["learner/train"]["calls"] == 2
    assert "learner/train/update" in process["keys"] and process["keys_in_trace"] > 0
    assert process["keys_in_trace"] + len(process["keys_missing"]) == process["keys_in_tree"]
    assert not shm_leaked(shm_before)
    if steps != EVERY_STEP:
        return

    assert summary["ceiling"]["cartpole"]["fps"] > 0
    assert summary["benchmark"]["cartpole"]["sf"]["fps_whole_run"] > 0
    breakdown = summary["breakdown"]
    assert breakdown["status"] == "ok" and breakdown["device"] == "cpu"
    assert breakdown["layers_s"]["cuda_api"] == 0 and breakdown["layers_s"]["gpu"] == 0
    written = json.loads((tmp_path / "check" / "breakdown" / "breakdown" / "profiling" / "breakdown.json").read_text())
    assert breakdown["corrected_vs_uninstrumented"] == written["corrected_vs_uninstrumented"]
    assert "## The `cartpole` suite" in text and "## Breakdown" in text


@pytest.mark.slow  # a run that trains until its 15-second window closes
def test_sigterm_stops_the_run_in_progress_and_keeps_the_summary(tmp_path, shm_before):
    """`timeout` or a scheduler ending the check: the training run it started stops with it, and the summary on disk
    says the check was interrupted."""
    out = tmp_path / "check"
    args = ["--out", str(out), "--device=cpu", "--workers", "2", "--scaling_suite", "cartpole", "--steps", "scaling"]
    args += ["--", "--serial_mode=True", "--num_envs_per_worker=2"]  # trains until its window closes, 15 s and more
    proc = start_sf(args, module="sf.bench.device_check", new_session=False)
    log = out / "logs" / "scaling_w2.log"
    deadline = time.monotonic() + 180
    while not (log.exists() and "learner and inference on" in log.read_text()) and proc.poll() is None:
        assert time.monotonic() < deadline, "the scaling run never started"
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()[0][-3000:]
    children = psutil.Process(proc.pid).children(recursive=True)
    assert children, "the training run is a process of its own"
    proc.send_signal(signal.SIGTERM)
    output = proc.communicate(timeout=60)[0]
    assert proc.returncode == 130, output[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["machine"]["cores"]
    assert "interrupted after" in output
    gone, alive = psutil.wait_procs(children, timeout=30)  # the run's guard may outlive it by a few seconds
    assert not alive
    assert not shm_leaked(shm_before)


def test_cpu_batched_step_counts_the_observation_copies(tmp_path):
    """The batched step on a machine without a GPU: the torch env stepped bare and trained batched, one observation
    copy per env step and none of them into host memory (nothing lives anywhere else)."""
    out = tmp_path / "check"
    args = ["--out", str(out), "--device=cpu", "--steps", "batched", "--batched_copies=128"]
    proc = run_sf([*args, "--batched_frames=8192", "--budget_s=200"], module="sf.bench.device_check", timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    result = summary["batched"]["tensor_pendulum"]
    assert result["status"] == 0 and result["copies"] == 128 and result["env_steps"] >= 8192 // 128
    assert result["obs_copies_per_step"] == 1.0 and result["obs_host_copies_per_step"] == 0.0
    assert result["obs_copy_kinds"] == ["copy_"] and result["bare_copies_per_s"] > 0 and result["fps_steady"] > 0
    assert "## Batched sampling" in (out / "summary.md").read_text()
