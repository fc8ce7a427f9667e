"""The env mode of `python -m sf.benchmark`: the ceiling's arithmetic, the sampling-only runtime switch, and the
table / benchmark.json / chart of one tiny CartPole layout end to end; the suites' commands and machine."""

from __future__ import annotations

import json
import os
import time

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import run_sf

from sf.bench.ceiling import ceiling_processes, measure_ceiling, random_actions
from sf.bench.cli import main
from sf.bench.env_command import resolve
from sf.bench.env_mode import EnvBenchmark, Phase
from sf.bench.runs import LearnerCore, load_report, verdict_of
from sf.bench.suites import SUITES, describe_machine
from sf.bench.table import format_table
from sf.cfg.arguments import default_cfg
from sf.envs import register_env
from sf.envs.families import EnvFamily, family_of
from sf.envs.registry import register_vector_env
from sf.envs.spaces import ActionSpec
from sf.envs.vector import VectorConfig, VectorStep

SLEEP_S = 0.002
FRAMESKIP = 3


class SleepyEnv(gym.Env):
    """Each step sleeps a fixed time and stands for FRAMESKIP frames: a simulator whose speed is known."""

    frameskip = FRAMESKIP
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(3)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        time.sleep(SLEEP_S)
        self.t += 1
        return np.zeros(2, np.float32), 1.0, self.t >= 50, False, {}


class SleepyVectorEnv:
    """A vector env whose every batch step sleeps SLEEP_S whatever its size: a pool stepping envs in parallel."""

    obs_spec = {"obs": ((2,), np.dtype(np.float32))}
    action_spec = ActionSpec((3,), 0)
    frameskip = FRAMESKIP
    reward_scale = 1.0

    def __init__(self, config: VectorConfig):
        self.num_envs = config.num_envs

    def reset(self):
        return {"obs": np.zeros((self.num_envs, 2), np.float32)}

    def step(self, env_ids, actions):
        time.sleep(SLEEP_S)
        n = len(env_ids)
        return VectorStep({"obs": np.zeros((n, 2), np.float32)}, np.zeros(n, np.float32), *[np.zeros(n, bool)] * 2)

    def close(self):
        pass


def register_sleepy(*_) -> None:
    register_env("sleepy", lambda *args, **kwargs: SleepyEnv())
    register_vector_env("sleepy", lambda name, cfg, config: SleepyVectorEnv(config))


SLEEPY = EnvFamily("sleepy", "sleepy", "unused", None, f"{__name__}:register_sleepy")


def test_ceiling_sums_processes_and_counts_frameskip():
    """2 processes x 2 envs, each step a 2 ms sleep of 3 frames: at most 2 * 3 / 0.002 = 3,000 frames/s."""
    cfg = default_cfg(env="sleepy", num_workers=2, num_envs_per_worker=2, set_workers_cpu_affinity=False)
    result = measure_ceiling(cfg, SLEEPY, seconds=1.0)
    bound = cfg.num_workers * FRAMESKIP / SLEEP_S
    assert result.processes == 2 and result.envs == 4
    assert 0.4 * bound < result.fps <= 1.02 * bound  # sleeps only overshoot; a loaded machine overshoots more


def test_ceiling_steps_on_every_core_whatever_the_layout():
    """A serial run's one process, or fewer workers than cores, is measured against every core: the layout's envs
    are spread over as many processes as there are cores (at most one per env)."""
    serial = default_cfg(env="sleepy", num_workers=2, num_envs_per_worker=2, serial_mode=True, async_rl=False)
    result = measure_ceiling(serial, SLEEPY, seconds=0.5, cores=2)
    assert result.processes == 2 and result.envs == 4
    assert 0.4 * 2 * FRAMESKIP / SLEEP_S < result.fps <= 1.02 * 2 * FRAMESKIP / SLEEP_S
    assert ceiling_processes(serial, cores=1) == 1
    assert ceiling_processes(default_cfg(num_workers=1, num_envs_per_worker=2), cores=3) == 2  # one env each at most
    assert ceiling_processes(default_cfg(num_workers=4, num_envs_per_worker=8), cores=2) == 4  # the layout's, more


def test_vector_ceiling_steps_a_split_per_call():
    """2 processes x 4 envs in 2 splits, each call one 2 ms sleep for 2 envs of 3 frames: at most 6,000 frames/s."""
    cfg = default_cfg(env="sleepy", num_workers=2, num_envs_per_worker=4, envpool=True, set_workers_cpu_affinity=False)
    result = measure_ceiling(cfg, SLEEPY, seconds=1.0, cores=2)
    bound = cfg.num_workers * 2 * FRAMESKIP / SLEEP_S
    assert result.processes == 2 and result.envs == 8
    assert 0.4 * bound < result.fps <= 1.02 * bound


def test_random_actions_cover_each_part_of_the_flat_vector():
    actions = random_actions(ActionSpec((3, 5), 2), 2000, np.random.default_rng(0))
    assert actions.shape == (2000, 4)
    assert set(np.unique(actions[:, 0])) == {0, 1, 2} and set(np.unique(actions[:, 1])) == {0, 1, 2, 3, 4}
    assert abs(float(actions[:, 2:].std()) - 1.0) < 0.1


def test_family_of_env_names():
    assert family_of("doom_basic").train_module == "sf_examples.vizdoom.train_vizdoom"
    assert family_of("mujoco_ant").train_module == "sf_examples.mujoco.train_mujoco"
    assert family_of("atari_breakout").train_module == "sf_examples.atari.train_atari"
    assert family_of("CartPole-v1").train_module == "sf_examples.train_gym_env"


@pytest.mark.parametrize(
    "text, kind",
    [
        ('{"verdict": "inference-bound", "components": {}}', "inference"),
        ('log line\n{"verdict": {"kind": "learner", "evidence": "x"}}', "learner"),
        ('{"verdict": "verdict: simulation-bound"}', "simulation"),
        ('{"verdict": "unknown-bound"}', None),
        ("not json", None),
    ],
)
def test_verdict_of_a_report_output(text, kind):
    assert verdict_of(load_report(text)) == kind


def _report(fps, **cpu_by_role):
    return {"fps": fps, "components": [{"name": r, "role": r, "cpu": c} for r, c in cpu_by_role.items()]}


def test_learner_on_a_core_of_its_own_is_the_window_fps_over_its_cores():
    learner = LearnerCore.of(_report(17_000.0, Learner=0.85, InferenceWorker=0.4))
    assert learner.cores == pytest.approx(0.85) and learner.fps_alone == pytest.approx(20_000.0)
    # a learner that already had a whole core (or more: several threads) is at its bound
    assert LearnerCore.of(_report(9_000.0, Learner=1.3)).fps_alone == pytest.approx(9_000.0)
    assert LearnerCore.of(_report(9_000.0, InferenceWorker=0.5)) is None  # no learner (sampling only)
    assert LearnerCore.of(_report(9_000.0, Learner=None)) is None  # no CPU figure
    assert LearnerCore.of(_report(0.0, Learner=0.5)) is None and LearnerCore.of(None) is None


def test_table_states_the_learner_bound_beside_the_ceiling():
    bench = EnvBenchmark("CartPole-v1", _LAYOUT, "cpu", 10.0, 2, "now", 1.0, ceiling_processes=2)
    bench.phases = [
        Phase("ceiling", 100_000.0, None, 1.0, None, "ok"),
        Phase("sampling", 50_000.0, 45_000.0, 0.5, "simulation", "ok"),
        Phase("training", 17_000.0, 15_000.0, 0.17, "learner", "ok", learner_cores=0.85, learner_alone_fps=20_000.0),
    ]
    notes = [line for line in format_table(bench).splitlines() if line.startswith("learner:")]
    assert notes == [
        "learner: 0.85 of a core in the steady window; on a core of its own, doing the same work per frame, at most "
        "20,000 FPS (20 % of the ceiling)"
    ]
    bench.phases[2] = Phase("training", 17_000.0, 15_000.0, 0.17, "learner", "failed")
    assert not [line for line in format_table(bench).splitlines() if line.startswith("learner:")]


_LAYOUT = {
    "num_workers": 2,
    "num_envs_per_worker": 16,
    "worker_num_splits": 2,
    "policy_workers_per_policy": 1,
    "inference_placement": "rollout_worker",
    "batched_sampling": False,
    "serial_mode": False,
    "async_rl": True,
}


def test_sampling_only_counts_frames_and_never_trains(tmp_path):
    """Parallel, asynchronous: the frame stop condition ends the run; the learner never enters its training scope."""
    proc = run_sf(
        [
            "--env=CartPole-v1",
            "--num_workers=2",
            "--num_envs_per_worker=4",
            "--sampling_only=True",
            "--train_for_env_steps=6000",
            "--rollout=16",
            "--batch_size=128",
            "--num_batches_per_epoch=1",
            f"--train_dir={tmp_path}",
            "--experiment=s",
        ],
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    exp = tmp_path / "s"
    summary = json.loads((exp / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["env_frames"]["0"] >= 6000
    assert summary["policy_versions"]["0"] == 0  # nothing trained, nothing published
    learner = json.loads((exp / "profile.json").read_text())["Learner 0"]["tree"]
    assert "train" not in learner and "prepare_batch" not in learner
    assert not list(exp.glob("checkpoint_p0/*"))


@pytest.mark.slow
def test_env_mode_table_json_and_chart(tmp_path, capsys):
    """A tiny serial CartPole layout: three rows, shares computed from the FPS figures, files in the folder."""
    code = main(
        [
            "--env=CartPole-v1",
            "--serial_mode=True",
            "--async_rl=False",
            "--num_workers=1",
            "--num_envs_per_worker=4",
            "--rollout=16",
            "--batch_size=64",
            "--num_batches_per_epoch=1",
            "--train_for_env_steps=3000",
            "--phase_s=1",
            f"--train_dir={tmp_path}",
            "--experiment=b",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    lines = out.splitlines()
    table = lines[next(i for i, line in enumerate(lines) if line.startswith("phase")) + 2 :][:3]
    bench = json.loads((tmp_path / "b" / "benchmark.json").read_text())
    phases = {p["name"]: p for p in bench["phases"]}
    assert [p["name"] for p in bench["phases"]] == ["ceiling", "sampling", "training"]
    ceiling = phases["ceiling"]["fps"]
    for name in ("sampling", "training"):
        phase = phases[name]
        summary = json.loads((tmp_path / "b" / name / "summary.json").read_text())
        assert phase["fps"] == pytest.approx(summary["fps_steady"])  # the run's own record
        assert phase["fps_whole_run"] == pytest.approx(summary["fps"])
        assert phase["share_of_ceiling"] == pytest.approx(phase["fps"] / ceiling)
        assert summary["env_frames"]["0"] >= 3000
        verdict = f"{phase['verdict']}-bound" if phase["verdict"] else "n/a"
        row = table[1 if name == "sampling" else 2]
        assert f"{phase['fps']:,.0f}" in row and f"{100 * phase['share_of_ceiling']:.0f} %" in row
        assert row.rstrip().endswith(verdict)
    assert "sampling_only" in phases["sampling"]["command"] and "sampling_only" not in phases["training"]["command"]
    assert bench["layout"]["num_envs_per_worker"] == 4 and bench["cpus"] == os.cpu_count()
    assert (tmp_path / "b" / "benchmark.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert table[0].startswith("simulator ceiling") and f"{ceiling:,.0f}" in table[0]
    assert table[1].startswith("sampling only") and table[2].startswith("training")


@pytest.mark.parametrize(
    "flags, names",
    [
        (["--env=CartPole-v1", "--num_workers=0"], "--num_workers"),
        (["--num_workers=2"], "--env"),
        (["--env=NoSuchEnv-v9"], "--env"),
        (["--suit", "cartpole"], "unknown flag --suit; did you mean --suite?"),
        (["--env=CartPole-v1", "--repeat=2"], "unknown flag --repeat; did you mean --repeats?"),
    ],
)
def test_bad_input_exits_2_before_anything_starts(tmp_path, capsys, flags, names):
    assert main([*flags, f"--train_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and names in err[0]
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("name", ["cartpole", "doom", "doom_benchmark"])
def test_suites_are_training_commands_their_family_accepts(name):
    """A suite flag the family does not know would fail only minutes into a comparison, on whichever machine."""
    suite = SUITES[name]
    family, cfg = resolve(list(suite.flags))
    assert cfg.env == suite.env and cfg.benchmark
    assert family.train_module == suite.module


def test_suite_results_name_their_machine():
    machine = describe_machine()
    assert machine["cores"] == os.cpu_count() and machine["cpu"]
    assert ("gpu" in machine) and (machine["gpu"] is None) == (not torch.cuda.is_available())
