"""Python profilers and torch.profiler on the selected processes of short CartPole runs: which files appear, and
that each opens in its own reader with the functions of the profiled component in it."""

import json
import os
import pstats
import signal
import subprocess
import sys

import pytest
from conftest import ROOT, start_sf

TINY = [
    "--env=CartPole-v1",
    "--use_rnn=False",
    "--encoder_mlp_layers",
    "16",
    "--num_workers=2",
    "--num_envs_per_worker=2",
    "--batch_size=128",
    "--rollout=32",
    "--device=cpu",
    "--decorrelate_envs_on_one_worker=False",
]
SERIAL = [*TINY, "--serial_mode=True"]


def train(args: list[str], frames: int = 1500) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    result = subprocess.run(
        [sys.executable, "-m", "sf_examples.train_gym_env", *args, f"--train_for_env_steps={frames}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def test_py_spy_records_each_rollout_worker_and_nothing_else(tmp_path):
    # 16 envs per worker: stepping them, not waiting for actions, is most of a rollout worker's time
    train(
        [
            *TINY,
            "--num_envs_per_worker=16",
            "--batch_size=512",
            "--inference_placement=own_process",
            f"--train_dir={tmp_path}",
            "--experiment=spy",
            "--profiling_backend=py_spy",
            "--profiling_worker_groups",
            "RolloutWorker",
        ],
        frames=40_000,
    )
    out = tmp_path / "spy" / "profiling"
    outputs = sorted(p.name for p in out.iterdir() if not p.name.endswith(".log"))
    assert outputs == [f"RolloutWorker_w{w}.{ext}" for w in (0, 1) for ext in ("speedscope.json", "svg")]
    for w in (0, 1):
        profile = json.loads((out / f"RolloutWorker_w{w}.speedscope.json").read_text())
        frames = {frame["name"] for frame in profile["shared"]["frames"]}
        # 100 Hz, idle samples dropped: 20k steps per worker sample stepping the envs tens of times
        assert "RolloutWorker._on_actions" in frames, sorted(frames)
        assert not any(name.startswith(("Learner.", "InferenceWorker.")) for name in frames)
        assert (out / f"RolloutWorker_w{w}.svg").read_text().rstrip().endswith("</svg>")


def test_yappi_on_the_learner_names_its_training_functions(tmp_path):
    train(
        [
            *TINY,
            f"--train_dir={tmp_path}",
            "--experiment=yappi",
            "--profiling_backend=yappi",
            "--profiling_worker_groups",
            "Learner",
        ]
    )
    out = tmp_path / "yappi" / "profiling"
    assert sorted(p.name for p in out.iterdir()) == ["Learner_0.pstat", "callgrind.out.Learner_0"]
    callgrind = (out / "callgrind.out.Learner_0").read_text()
    functions = {
        line.split()[1] for line in callgrind.splitlines() if line.startswith("fn=(") and len(line.split()) > 1
    }
    assert {"_on_train", "_train", "_losses"} <= {name.split(".")[-1] for name in functions}
    assert "desc: Clock: wall" in callgrind and "s process CPU" in callgrind
    stats = pstats.Stats(str(out / "Learner_0.pstat"))
    assert "Learner._on_train" in {func[2] for func in stats.stats}


def test_cprofile_in_serial_mode_starts_with_the_loop(tmp_path):
    train(
        [
            *SERIAL,
            f"--train_dir={tmp_path}",
            "--experiment=cprof",
            "--profiling_backend=cprofile",
            "--profiling_worker_groups",
            "Learner",
        ]
    )
    stats = pstats.Stats(str(tmp_path / "cprof" / "profiling" / "serial.prof"))
    names = {func[2] for func in stats.stats}
    assert {"_on_train", "step", "forward"} <= names
    assert "parse_full_cfg" not in names and "run_rl" not in names  # the profile starts at the loop, not at start-up


def test_pyinstrument_writes_html_and_speedscope(tmp_path):
    train(
        [
            *SERIAL,
            f"--train_dir={tmp_path}",
            "--experiment=pyi",
            "--profiling_backend=pyinstrument",
            "--profiling_worker_groups",
            "all",
        ]
    )
    out = tmp_path / "pyi" / "profiling"
    assert sorted(p.name for p in out.iterdir()) == ["serial.html", "serial.speedscope.json"]
    speedscope = json.loads((out / "serial.speedscope.json").read_text())
    assert "_on_train" in {frame["name"] for frame in speedscope["shared"]["frames"]}
    assert "<html" in (out / "serial.html").read_text()[:2000].lower()


def test_torch_window_records_the_chosen_iterations_with_timing_ranges(tmp_path):
    train(
        [
            *SERIAL,
            f"--train_dir={tmp_path}",
            "--experiment=torch",
            "--profiling_backend=torch",
            "--profiling_worker_groups",
            "Learner",
            "--profiling_steps",
            "3",
            "4",
        ]
    )
    out = tmp_path / "torch" / "profiling"
    trace = json.loads((out / "serial.steps3-4.pt.trace.json").read_text())
    assert (out / "tensorboard" / "serial.steps3-4.pt.trace.json").read_bytes() == (
        out / "serial.steps3-4.pt.trace.json"
    ).read_bytes()
    names = [event.get("name", "") for event in trace["traceEvents"]]
    # two learner iterations recorded: each is one train scope with its update inside, plus torch's ops under them
    assert names.count("learner/train") == 2 and names.count("learner/prepare_batch") == 2
    assert "learner/train/update" in names and "rollout_worker/env_step" in names
    assert any(name.startswith("aten::") for name in names)
    assert sorted(n for n in set(names) if n.startswith("ProfilerStep")) == ["ProfilerStep#1", "ProfilerStep#2"]


def test_backend_none_creates_no_folder(tmp_path):
    train([*SERIAL, f"--train_dir={tmp_path}", "--experiment=off", "--profiling_worker_groups", "all"])
    assert (tmp_path / "off" / "summary.json").exists() and not (tmp_path / "off" / "profiling").exists()


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_output_is_complete_after_a_signal(tmp_path, sig):
    """Stop a long parallel run by signal once the learner's profiler is running; its file must still load."""
    cmd = [
        *TINY,
        f"--train_dir={tmp_path}",
        "--experiment=sig",
        "--profiling_backend=cprofile",
        "--profiling_worker_groups",
        "Learner",
        "--train_for_env_steps=100000000",
    ]
    proc = start_sf(cmd, new_session=False)
    try:
        for line in proc.stdout:
            if "Fps is" in line and "Total num frames: 0." not in line:  # training is under way
                break
        proc.send_signal(sig)
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stats = pstats.Stats(str(tmp_path / "sig" / "profiling" / "Learner_0.prof"))
    assert any(func[2] == "_on_train" for func in stats.stats)
    assert json.loads((tmp_path / "sig" / "summary.json").read_text())["status"] == "interrupted"
