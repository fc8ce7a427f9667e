"""cProfile over a serial MuJoCo run: the profile shows env stepping, inference and learning, and cProfile's
times for them agree with sf's own Timing tree of the same run (profile.json)."""

from __future__ import annotations

import json
import os
import pstats
import subprocess
import sys

import pytest
from conftest import ROOT

pytest.importorskip("mujoco")

# the documented cProfile command (docs/mujoco.md), with small batches so the run lasts seconds
SMALL = [
    "--num_workers=2",
    "--num_envs_per_worker=4",
    "--rollout=32",
    "--batch_size=256",
    "--num_batches_per_epoch=1",
    "--num_epochs=1",
]

HOTSPOTS = {  # (path suffix of the defining file, function name): the part of the program it stands for
    ("gymnasium/envs/mujoco/ant_v5.py", "step"): "env step",
    ("sf/runtime/rollout_worker.py", "_on_actions"): "rollout loop",
    ("sf/runtime/inference_worker.py", "flush"): "inference",
    ("sf/model/mlp_kernel.py", "step"): "policy forward (the MLP inference kernel)",
    ("sf/runtime/learner.py", "_on_train"): "learner",
    ("sf/runtime/learner.py", "_train"): "learner SGD",
    ("sf/envs/adapter.py", "step"): "env step through the adapter",
}

# the same work measured twice: cProfile's cumulative time of a function, and the Timing scope that wraps its calls
# (component prefix of the profile.json entries, key in their trees)
SAME_WORK = {
    ("sf/envs/adapter.py", "step"): ("RolloutWorker", "env_step"),
    ("sf/runtime/learner.py", "_train"): ("Learner", "train"),
}


def _cumulative_times(stats: pstats.Stats) -> dict[tuple[str, str], float]:
    """Cumulative seconds of every hotspot found in the profile (files matched by path suffix)."""
    found: dict[tuple[str, str], float] = {}
    for (filename, _, func), (_, _, _, cumulative, _) in stats.stats.items():
        path = filename.replace(os.sep, "/")
        for suffix, name in HOTSPOTS:
            if func == name and path.endswith(suffix):
                found[(suffix, name)] = found.get((suffix, name), 0.0) + cumulative
    return found


@pytest.mark.slow  # the default suite profiles a serial CartPole run the same way (test_profiling_python)
def test_cprofile_of_serial_run_shows_env_inference_and_learner(tmp_path):
    prof = tmp_path / "out.prof"
    cmd = [
        sys.executable,
        "-m",
        "cProfile",
        "-o",
        str(prof),
        "-m",
        "sf_examples.mujoco.train_mujoco",
        "--env=mujoco_ant",
        "--serial_mode=True",
        "--async_rl=False",
        "--train_for_env_steps=4096",
        *SMALL,
        "--seed=1",
        f"--train_dir={tmp_path}",
        "--experiment=prof",
    ]
    result = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONUNBUFFERED="1")
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "Collected {0: " in result.stdout

    stats = pstats.Stats(str(prof))
    found = _cumulative_times(stats)
    missing = [
        f"{what} ({name} in {suffix})"
        for (suffix, name), what in HOTSPOTS.items()
        if found.get((suffix, name), 0.0) <= 0.0
    ]
    assert not missing, f"not in the profile with time > 0: {missing}"

    profile = json.loads((tmp_path / "prof" / "profile.json").read_text())
    for function, (component, key) in SAME_WORK.items():
        timed = sum(entry["tree"][key]["time"] for name, entry in profile.items() if name.startswith(component))
        # the scope wraps exactly the calls cProfile counts, plus a few microseconds of bookkeeping per call
        assert 0.8 * timed <= found[function] <= 1.05 * timed, (function, found[function], key, timed)
