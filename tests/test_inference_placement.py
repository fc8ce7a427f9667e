"""--inference_placement: which layouts `auto` picks, and a parallel run with inference inside the rollout
worker processes: no inference process, an inference worker per rollout worker in that worker's process, serving
it alone, profiled when its group is selected."""

import json
import pstats
from types import SimpleNamespace

import pytest
from conftest import CARTPOLE_LAYOUT, alive, run_sf, shm_leaked, started_pids
from torch import nn

from sf.runner.build import COLOCATE_MAX_PARAMS, resolve_inference_placement

FAST = [*CARTPOLE_LAYOUT, "--device=cpu"]


def _cfg(placement="auto", policy_workers=1):
    return SimpleNamespace(inference_placement=placement, policy_workers_per_policy=policy_workers)


@pytest.mark.parametrize(
    "params, device, policy_workers, expected",
    [
        (COLOCATE_MAX_PARAMS - 1, "cpu", 1, "rollout_worker"),
        (COLOCATE_MAX_PARAMS, "cpu", 1, "own_process"),  # weight reads dominate: batch across workers
        (1000, "cuda", 1, "own_process"),  # one CUDA context and model, not one per rollout worker
        (1000, "cpu", 2, "own_process"),  # the user asked for inference processes
    ],
)
def test_auto_placement(params, device, policy_workers, expected):
    model = nn.Linear(params, 1, bias=False)
    assert resolve_inference_placement(_cfg(policy_workers=policy_workers), device, model) == expected


@pytest.mark.parametrize("placement", ["own_process", "rollout_worker"])
def test_an_explicit_placement_is_kept(placement):
    assert resolve_inference_placement(_cfg(placement), "cuda", nn.Linear(10, 1)) == placement


def test_inference_in_the_rollout_workers_processes(tmp_path, shm_before):
    result = run_sf([*FAST, "--train_for_env_steps=6000", "--experiment=co", f"--train_dir={tmp_path}"], timeout=240)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "policy inference in each rollout worker's process" in result.stdout
    started = started_pids(result.stdout.splitlines())
    assert not any(name.startswith("InferenceWorker") for name in started)  # no process of its own
    profile = json.loads((tmp_path / "co" / "profile.json").read_text())
    for w in (0, 1):
        inference, rollout = profile[f"InferenceWorker_p0-w{w}"], profile[f"RolloutWorker_w{w}"]
        assert inference["pid"] == rollout["pid"] == started[f"RolloutWorker_w{w}"]
        assert inference["tree"]["one_step"]["children"]["handle_policy_step"]["children"]["forward"]["time"] > 0
    config = json.loads((tmp_path / "co" / "config.json").read_text())
    assert config["inference_placement"] == "rollout_worker"  # config.json records what auto chose
    summary = json.loads((tmp_path / "co" / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["env_frames"]["0"] >= 6000
    assert all(not alive(pid) for pid in started.values())
    assert not shm_leaked(shm_before)


def test_selecting_inference_profiles_the_rollout_workers_processes(tmp_path):
    result = run_sf(
        [
            *FAST,
            "--train_for_env_steps=3000",
            "--experiment=prof",
            f"--train_dir={tmp_path}",
            "--inference_placement=rollout_worker",
            "--profiling_backend=yappi",
            "--profiling_worker_groups",
            "InferenceWorker",
        ],
        timeout=240,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    out = tmp_path / "prof" / "profiling"
    assert sorted(p.name for p in out.glob("*.pstat")) == ["RolloutWorker_w0.pstat", "RolloutWorker_w1.pstat"]
    for w in (0, 1):
        names = {func[2] for func in pstats.Stats(str(out / f"RolloutWorker_w{w}.pstat")).stats}
        assert {"InferenceWorker.flush", "InferenceWorker._on_request"} <= names  # its handlers ran in this process
