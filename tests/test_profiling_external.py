"""nsys and rocprof-sys around the selected processes, checked against a stub profiler that records its argv and
environment and then runs the command it was given, so the training run itself completes."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from sf.profiling.backends.external import nsight_command, render_flags, render_options, rocprof_sys_command
from sf.profiling.config import ProfilingConfig

TINY = [
    "--env=CartPole-v1",
    "--use_rnn=False",
    "--encoder_mlp_layers",
    "16",
    "--num_workers=2",
    "--num_envs_per_worker=2",
    "--batch_size=128",
    "--rollout=32",
    "--train_for_env_steps=1500",
    "--device=cpu",
    "--decorrelate_envs_on_one_worker=False",
]
STUB = """#!{python}
import json, os, sys
with open({record!r}, "a") as out:
    env = {{k: v for k, v in os.environ.items() if k.startswith("ROCPROFSYS")}}
    out.write(json.dumps({{"argv": sys.argv, "env": env}}) + "\\n")
start = sys.argv.index({python!r})
os.execv(sys.argv[start], sys.argv[start:])
"""


def install_stub(bin_dir: Path, name: str, record: Path) -> Path:
    bin_dir.mkdir(exist_ok=True)
    stub = bin_dir / name
    stub.write_text(STUB.format(python=sys.executable, record=str(record)))
    stub.chmod(0o755)
    return stub


def train(args: list[str], bin_dir: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONUNBUFFERED="1", PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run(
        [sys.executable, "-m", "sf_examples.train_gym_env", *TINY, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_rendering_follows_one_letter_and_long_keys():
    assert render_options({"t": "cuda,nvtx", "sample": "process-tree"}) == ["-t", "cuda,nvtx", "--sample=process-tree"]
    assert render_flags(("python-backtrace", "x")) == ["--python-backtrace", "-x"]


def test_nsight_steps_inject_capture_range_and_user_values_win(tmp_path, monkeypatch):
    stub = install_stub(tmp_path / "bin", "nsys", tmp_path / "unused")
    monkeypatch.setenv("PATH", f"{stub.parent}{os.pathsep}{os.environ['PATH']}")
    stem = tmp_path / "Learner_0"
    whole = ProfilingConfig(backend="nsight", worker_groups=("Learner",), options={"t": "cuda"})
    assert nsight_command(whole, stem)[0] == [str(stub), "profile", "-t", "cuda", "-o", str(stem)]
    gated = ProfilingConfig(
        backend="nsight",
        worker_groups=("Learner",),
        steps=(3,),
        flags=("python-backtrace",),
        options={"capture-range-end": "repeat", "output": "/elsewhere/x"},
    )
    assert nsight_command(gated, stem)[0] == [
        str(stub),
        "profile",
        "--python-backtrace",
        "--capture-range-end=repeat",
        "--output=/elsewhere/x",
        "--capture-range=cudaProfilerApi",
    ]


def test_rocprof_sys_env_is_derived_and_user_env_wins(tmp_path, monkeypatch):
    stub = install_stub(tmp_path / "bin", "rocprof-sys-python", tmp_path / "unused")
    monkeypatch.setenv("PATH", f"{stub.parent}{os.pathsep}{os.environ['PATH']}")
    pcfg = ProfilingConfig(
        backend="rocprof_sys",
        worker_groups=("Learner",),
        args={"T": "hip", "output-format": "json"},
        env={"ROCPROFSYS_OUTPUT_PREFIX": "mine."},
    )
    argv, env = rocprof_sys_command(pcfg, tmp_path / "Learner_0")
    assert argv == [str(stub), "-T", "hip", "--output-format=json", "--"]
    assert env == {
        "ROCPROFSYS_TIME_OUTPUT": "false",
        "ROCPROFSYS_OUTPUT_PATH": str(tmp_path),
        "ROCPROFSYS_OUTPUT_PREFIX": "mine.",
    }


def test_nsys_wraps_exactly_the_learner_process(tmp_path):
    record = tmp_path / "record.jsonl"
    stub = install_stub(tmp_path / "bin", "nsys", record)
    result = train(
        [
            f"--train_dir={tmp_path}",
            "--experiment=nsys",
            "--profiling_backend=nsight",
            "--profiling_worker_groups",
            "Learner",
            "--profiling_steps",
            "2",
            "--profiling_options",
            "t=cuda,nvtx",
            "capture-range-end=repeat",
        ],
        stub.parent,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    calls = records(record)
    assert len(calls) == 1, calls
    argv = calls[0]["argv"]
    out = tmp_path / "nsys" / "profiling"
    start = argv.index(sys.executable)
    assert argv[:start] == [
        str(stub),
        "profile",
        "-t",
        "cuda,nvtx",
        "--capture-range-end=repeat",
        "--capture-range=cudaProfilerApi",
        "-o",
        str(out / "Learner_0"),
    ]
    command = argv[
        start:
    ]  # the interpreter's own command line, unchanged: [python, (flags), -c, ..., --multiprocessing-fork]
    assert "spawn_main" in command[command.index("-c") + 1] and command[-1] == "--multiprocessing-fork"
    assert sorted(p.name for p in out.iterdir()) == ["Learner_0.launch.sh"]
    assert json.loads((tmp_path / "nsys" / "summary.json").read_text())["status"] == "ok"


@pytest.mark.slow  # the wrapper mechanism is the nsys test's; rocprof-sys's env is derived above without a run
def test_rocprof_sys_wraps_each_rollout_worker_with_its_env(tmp_path):
    record = tmp_path / "record.jsonl"
    stub = install_stub(tmp_path / "bin", "rocprof-sys-python", record)
    result = train(
        [
            f"--train_dir={tmp_path}",
            "--experiment=roc",
            "--profiling_backend=rocprof_sys",
            "--profiling_worker_groups",
            "RolloutWorker",
            "--profiling_args",
            "T=hip",
            "--profiling_env",
            "ROCPROFSYS_SAMPLING_FREQ=50",
        ],
        stub.parent,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    calls = sorted(records(record), key=lambda call: call["env"]["ROCPROFSYS_OUTPUT_PREFIX"])
    out = str(tmp_path / "roc" / "profiling")
    assert [call["argv"][: call["argv"].index(sys.executable)] for call in calls] == [
        [str(stub), "-T", "hip", "--"]
    ] * 2
    assert [call["env"] for call in calls] == [
        {
            "ROCPROFSYS_TIME_OUTPUT": "false",
            "ROCPROFSYS_OUTPUT_PATH": out,
            "ROCPROFSYS_OUTPUT_PREFIX": f"RolloutWorker_w{w}.",
            "ROCPROFSYS_SAMPLING_FREQ": "50",
        }
        for w in (0, 1)
    ]
