"""The profiling section: flags and the `profiling:` YAML section give the same dataclass; bad values fail by flag."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from sf.cfg.arguments import parse_full_cfg
from sf.profiling.config import GROUPS, ProfilingConfig
from sf.profiling.window import StepGate
from sf.utils.errors import ConfigError


def parse(*flags):
    return parse_full_cfg(["--env=CartPole-v1", "--train_dir=/tmp/td", "--experiment=e", *flags]).profiling


def test_flags_and_yaml_section_give_the_same_config(tmp_path):
    yaml_file = tmp_path / "p.yaml"
    yaml_file.write_text(
        "profiling:\n  backend: torch\n  worker_groups: [Learner, RolloutWorker]\n  steps: [3, 4]\n"
        "  output_dir: /tmp/out\n  options: {t: cuda, sample: none, flag: true}\n"
    )
    from_yaml = parse(f"--cfg={yaml_file}")
    from_flags = parse(
        "--profiling_backend=torch",
        "--profiling_worker_groups",
        "Learner",
        "RolloutWorker",
        "--profiling_steps",
        "3",
        "4",
        "--profiling_output_dir=/tmp/out",
        "--profiling_options",
        "t=cuda",
        "sample=none",
        "flag=true",
    )
    assert from_yaml == from_flags
    assert from_flags == ProfilingConfig(
        backend="torch",
        worker_groups=("Learner", "RolloutWorker"),
        steps=(3, 4),
        output_dir=Path("/tmp/out"),
        options={"t": "cuda", "sample": "none", "flag": "true"},
    )
    # the command line overrides the section, key by key
    assert parse(f"--cfg={yaml_file}", "--profiling_steps", "7").steps == (7,)


def test_defaults_all_and_the_master_switch(tmp_path):
    off = parse()
    assert off.backend == "none" and not off.enabled and not off.selects("Learner")
    assert off.output_dir == Path("/tmp/td/e/profiling")
    assert parse("--profiling_backend=cprofile", "--profiling_worker_groups", "all").worker_groups == GROUPS
    assert not parse("--profiling_backend=cprofile").enabled  # no groups: nothing profiled
    disabled = tmp_path / "off.yaml"
    disabled.write_text("profiling:\n  backend: yappi\n  enabled: false\n  worker_groups: [all]\n")
    assert not parse(f"--cfg={disabled}").enabled


@pytest.mark.parametrize(
    "flags, flag",
    [
        (["--profiling_backend=yappi", "--profiling_worker_groups", "Learners"], "--profiling_worker_groups"),
        (["--profiling_backend=cprof"], "--profiling_backend"),
        (
            ["--profiling_backend=torch", "--profiling_worker_groups", "all", "--profiling_steps", "0"],
            "--profiling_steps",
        ),
        (["--profiling_options", "t"], "--profiling_options"),
    ],
)
def test_bad_values_name_their_flag(flags, flag):
    with pytest.raises(ConfigError) as err:
        parse(*flags)
    assert err.value.flag == flag and flag in str(err.value)


def test_windows_are_runs_of_consecutive_steps():
    assert ProfilingConfig(steps=(9, 3, 4, 5, 4)).windows == [(3, 5), (9, 9)]


@pytest.mark.parametrize("preset", sorted(p.stem for p in (ROOT / "configs" / "profile").glob("*.yaml")))
def test_presets_parse(preset, tmp_path, monkeypatch):
    for binary in ("nsys", "rocprof-sys-python"):  # the GPU profilers need not be installed to read the presets
        stub = tmp_path / binary
        stub.write_text("#!/bin/sh\n")
        stub.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    pcfg = parse(f"--cfg=profile/{preset}")
    assert pcfg.enabled and pcfg.backend in preset


class Recorder:
    """A backend that writes down what the gate asks of it, one instance per window."""

    warmup_steps = 1
    ranges = False
    calls: list = []

    def __init__(self, pcfg, stem, warmup=0, active=0):
        self.stem = stem
        self.calls.append(("open", stem.name, warmup, active))

    def start(self):
        pass

    def step(self):
        self.calls.append(("step", self.stem.name))

    def stop(self):
        self.calls.append(("stop", self.stem.name))

    def outputs(self):
        return []


def test_gate_opens_each_window_once_with_warmup(tmp_path):
    Recorder.calls = []
    gate = StepGate(
        ProfilingConfig(backend="torch", worker_groups=("Learner",), steps=(3, 4, 9), output_dir=tmp_path),
        "Learner_0",
        Recorder,
    )
    gate.begin(1)
    for step in (1, 2, 2, 3, 4, 5, 6, 8, 9, 10, 11):
        gate.at_step(step)
    gate.end()
    assert Recorder.calls == [
        ("open", "Learner_0.steps3-4", 1, 2),
        ("step", "Learner_0.steps3-4"),
        ("step", "Learner_0.steps3-4"),
        ("stop", "Learner_0.steps3-4"),
        ("open", "Learner_0.step9", 1, 1),
        ("step", "Learner_0.step9"),
        ("stop", "Learner_0.step9"),
    ]


def test_missing_profiler_binary_stops_before_anything_starts(tmp_path):
    bare_path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if not (Path(p) / "nsys").exists())
    env = dict(os.environ, PATH=bare_path)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sf_examples.train_gym_env",
            "--env=CartPole-v1",
            "--profiling_backend=nsight",
            "--profiling_worker_groups",
            "Learner",
            f"--train_dir={tmp_path}",
            "--experiment=nobin",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    error = result.stderr.strip().splitlines()
    assert len(error) == 1 and "`nsys`" in error[0] and "--profiling_backend" in error[0], result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "nobin").exists()
