"""Every command a user types answers `--help` with its usage and exit status 0 and starts nothing: the train and
enjoy scripts of every env family, the profiling, benchmark, export and Hub commands, and the scripts under benchmarks/
and docs/.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from sf.envs.families import families

FAMILY_SCRIPTS = sorted(
    {module for family in families() for module in (family.train_module, family.enjoy_module) if module}
)
COMMANDS: list[tuple[str, ...]] = [
    *(("-m", module) for module in FAMILY_SCRIPTS),
    ("-m", "sf_examples.profiling.induced_bottlenecks"),
    ("-m", "sf_examples.profiling.weighted_sampling"),
    ("-m", "sf_examples.sampler.use_simplified_sampling_api"),
    ("-m", "sf.train"),
    ("-m", "sf.enjoy"),
    ("-m", "sf.profile"),
    ("-m", "sf.profile", "report"),
    ("-m", "sf.profile", "top"),
    ("-m", "sf.profile", "breakdown"),
    ("-m", "sf.chaos"),
    ("-m", "sf.export_onnx"),
    ("-m", "sf.huggingface.load_from_hub"),
    ("-m", "sf.huggingface.push_to_hub"),
    ("-m", "sf_examples.envpool.atari.train_envpool_atari"),
    ("-m", "sf_examples.envpool.atari.enjoy_envpool_atari"),
    ("-m", "sf_examples.envpool.mujoco.train_envpool_mujoco"),
    ("-m", "sf_examples.envpool.mujoco.enjoy_envpool_mujoco"),
    ("-m", "sf.breakdown"),
    ("-m", "sf.benchmark"),
    ("-m", "sf.bench.ray_cluster"),
    ("-m", "sf.bench.profiling_cost"),
    ("-m", "sf.bench.watch_cost"),
    ("-m", "sf.bench.device_check"),
    *((str(path),) for path in sorted((ROOT / "benchmarks").glob("bench_*.py"))),
    (str(ROOT / "docs" / "gen_flags.py"),),
    (str(ROOT / "docs" / "plot_learning_curves.py"),),
    (str(ROOT / "docs" / "plot_populations.py"),),
]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("help")


@pytest.fixture(scope="module")
def answers(workdir) -> dict[tuple[str, ...], dict]:
    """Every command's answer, from an empty folder, all in one interpreter (tests/run_help.py): most of a `--help`'s
    time is the interpreter starting and importing torch."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "run_help.py")],
        input=json.dumps(COMMANDS),
        cwd=workdir,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return dict(zip(COMMANDS, json.loads(result.stdout.splitlines()[-1])))


def test_the_family_scripts_include_every_example_family():
    assert {"sf_examples.train_gym_env", "sf_examples.vizdoom.enjoy_vizdoom", "sf_examples.mujoco.train_mujoco"} <= set(
        FAMILY_SCRIPTS
    )


@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(c) for c in COMMANDS])
def test_help_prints_usage_and_exits_0(command, answers):
    result = answers[command]
    assert result["exit"] == 0, f"{' '.join(command)} --help:\n{result['stdout'][-1500:]}\n{result['stderr'][-1500:]}"
    assert result["stdout"].startswith("usage: "), result["stdout"][:300]
    assert "Traceback" not in result["stderr"]


def test_help_starts_nothing(answers, workdir):
    assert answers and list(workdir.iterdir()) == []  # no train_dir, no experiment, no output of any kind
