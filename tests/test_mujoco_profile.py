"""The issue's cProfile command on a serial MuJoCo run: the profile must show env stepping, inference and learning."""
from __future__ import annotations

import os
import pstats
import subprocess
import sys

import pytest

from conftest import ROOT

pytest.importorskip("mujoco")

# the command, with small batches so the run lasts seconds
SMALL = ["--num_workers=2", "--num_envs_per_worker=4", "--rollout=32", "--batch_size=256", "--num_batches_per_epoch=1",
         "--num_epochs=1"]

HOTSPOTS = {  # (path suffix of the defining file, function name): the part of the program it stands for
    ("gymnasium/envs/mujoco/ant_v5.py", "step"): "env step",
    ("sf/runtime/rollout_worker.py", "_on_actions"): "rollout loop",
    ("sf/runtime/inference_worker.py", "flush"): "inference",
    ("sf/model/actor_critic.py", "forward"): "policy forward",
    ("sf/runtime/learner.py", "_on_train"): "learner",
    ("sf/runtime/learner.py", "_train"): "learner SGD",
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


def test_cprofile_of_serial_run_shows_env_inference_and_learner(tmp_path):
    prof = tmp_path / "out.prof"
    cmd = [sys.executable, "-m", "cProfile", "-o", str(prof), "-m", "sf_examples.mujoco.train_mujoco",
           "--env=mujoco_ant", "--serial_mode=True", "--async_rl=False", "--train_for_env_steps=4096", *SMALL,
           "--seed=1", f"--train_dir={tmp_path}", "--experiment=prof"]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "Collected {0: " in result.stdout

    stats = pstats.Stats(str(prof))
    found = _cumulative_times(stats)
    missing = [f"{what} ({name} in {suffix})" for (suffix, name), what in HOTSPOTS.items() if found.get((suffix, name), 0.0) <= 0.0]
    assert not missing, f"not in the profile with time > 0: {missing}"

    main_loop = max(ct for (filename, _, func), (_, _, _, ct, _) in stats.stats.items()
                    if func == "run" and filename.replace(os.sep, "/").endswith("sf/runtime/event_loop.py"))
    for key in HOTSPOTS:  # every hotspot runs inside the event loop, so none can take longer than it
        assert found[key] <= main_loop * 1.001
