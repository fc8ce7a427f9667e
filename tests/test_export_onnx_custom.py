"""ONNX export of a run whose training script registered its own env and model: the script shown in
docs/customizing.md (it registers them and calls `export_onnx(cfg, path)`) writes a graph onnxruntime agrees with;
`python -m sf.export_onnx`, which cannot know them, names in one line the env or the model registration it lacks,
and the flags a mismatch message names are the ones given on its command line, not those the run was trained with.
Each command runs in a fresh process, as a user's would: nothing registered but what sf and the env family register."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import ROOT, write_experiment
from sample_factory_imports import PAGE, write_rewritten_scripts

from sf.cfg.arguments import parse_full_cfg
from sf.envs import EnvAdapter, EnvConfig, create_env
from sf.envs.gym_family import register_gym_env
from sf.envs.spaces import EnvInfo
from sf.model.factory import ModelFactory, restore_model_factory
from sf.runner.build import build_model

ort = pytest.importorskip("onnxruntime")


def documented_script() -> str:
    """The export script of the page's ONNX section."""
    section = PAGE.read_text().split("## ONNX export", 1)[1].split("\n## ", 1)[0]
    (script,) = [body for body in re.findall(r"```python\n(.*?)```", section, re.S) if "export_onnx(cfg" in body]
    return script


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    paths = os.pathsep.join([str(ROOT), str(cwd)])
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=dict(os.environ, PYTHONPATH=paths), capture_output=True, text=True
    )


def one_error_line(result: subprocess.CompletedProcess, status: int = 2) -> str:
    assert result.returncode == status, result.stdout[-2000:] + result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sf: error: "), result.stderr[-3000:]
    return lines[0]


@pytest.fixture
def scripts(tmp_path, monkeypatch) -> Path:
    folder = write_rewritten_scripts(tmp_path)
    monkeypatch.syspath_prepend(str(folder))
    yield folder
    restore_model_factory(ModelFactory())
    for name in ("train_custom_actor_critic", "train_collect"):
        sys.modules.pop(name, None)


def experiment(module_name: str, argv: list[str], train_dir: Path) -> tuple[torch.nn.Module, EnvInfo]:
    """An experiment folder as a run of the script leaves one (config.json, a checkpoint naming the parts the script
    registered), its observation normalizer moved so the graph must carry it; built in this process."""
    module = importlib.import_module(module_name)
    module.register_custom_components()
    cfg = module.parse_custom_args([*argv, f"--train_dir={train_dir}", "--experiment=exp", "--normalize_input=True"])
    env = EnvAdapter(create_env(cfg.env, cfg, EnvConfig()), 1)
    info = EnvInfo(env.obs_spec, env.action_spec, 1.0, 1)
    env.reset(seed=1)
    obs = [env.random_steps(3, seed=i) for i in range(8)]
    env.close()
    torch.manual_seed(0)
    model = build_model(cfg, info, "cpu")
    model.normalize_obs({k: torch.as_tensor(np.stack([o[k] for o in obs])) for k in info.obs_spec}, update=True)
    write_experiment(train_dir / "exp", cfg, model)
    return model.eval(), info


def test_the_documented_script_exports_a_run_of_its_own_env_and_model(scripts, tmp_path):
    model, info = experiment("train_custom_actor_critic", ["--env=my_cartpole"], tmp_path)
    (scripts / "export_custom_actor_critic.py").write_text(documented_script())
    result = run(
        ["export_custom_actor_critic.py", "--env=my_cartpole", f"--train_dir={tmp_path}", "--experiment=exp"], scripts
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    session = ort.InferenceSession(str(scripts / "exp.onnx"), providers=["CPUExecutionProvider"])
    obs = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)
    actions, logits, values = session.run(None, {"obs": obs})
    with torch.no_grad():
        expected = model.policy_step(model.normalize_obs({"obs": torch.from_numpy(obs)}), None, deterministic=True)
    np.testing.assert_allclose(logits, expected.action_logits.numpy(), atol=1e-5, rtol=0)
    np.testing.assert_allclose(values, expected.values.numpy(), atol=1e-5, rtol=0)
    np.testing.assert_array_equal(actions, expected.actions.numpy())


def test_the_command_line_names_the_env_a_script_registers(scripts, tmp_path):
    experiment("train_custom_actor_critic", ["--env=my_cartpole"], tmp_path)
    line = one_error_line(
        run(["-m", "sf.export_onnx", "--env=my_cartpole", f"--train_dir={tmp_path}", "--experiment=exp"], tmp_path)
    )
    assert line.startswith("sf: error: --env: ") and "'my_cartpole'" in line
    assert "register_env" in line and "export_onnx(cfg, path)" in line
    assert not list(tmp_path.glob("*.onnx"))


def test_the_command_line_names_the_model_registration_it_lacks(scripts, tmp_path):
    """`collect` is an env family of sf's examples: the command line builds the env, and the family's own encoder."""
    experiment("train_collect", ["--env=collect"], tmp_path)
    args = ["-m", "sf.export_onnx", "--env=collect", f"--train_dir={tmp_path}", "--experiment=exp"]
    line = one_error_line(run(args, tmp_path))
    assert (
        line.startswith("sf: error: --experiment: the checkpoint in ") and "trained with encoder PoolingEncoder" in line
    )
    assert "global_model_factory().register_encoder_factory(...) for PoolingEncoder" in line
    assert "flags given here" not in line


def test_a_mismatch_names_only_the_flags_given_on_this_command_line(tmp_path):
    """The run was trained with flags of its own (its config.json keeps them); the export is given one that changes
    the model. And an export that fails writing its file is one line too."""
    register_gym_env("CartPole-v1")
    argv = ["--env=CartPole-v1", "--serial_mode=True", "--train_for_env_steps=4096", "--use_rnn=False"]
    cfg = parse_full_cfg([*argv, f"--train_dir={tmp_path}", "--experiment=exp"])
    env = EnvAdapter(create_env("CartPole-v1", cfg, EnvConfig()), 1)
    info = EnvInfo(env.obs_spec, env.action_spec, 1.0, 1)
    env.close()
    write_experiment(tmp_path / "exp", cfg, build_model(cfg, info, "cpu"))
    export = ["-m", "sf.export_onnx", "--env=CartPole-v1", f"--train_dir={tmp_path}", "--experiment=exp"]
    line = one_error_line(run([*export, "--encoder_mlp_layers", "16"], tmp_path))
    assert "does not fit the model built for CartPole-v1" in line
    assert line.endswith("flags given here that may change it: --encoder_mlp_layers"), line
    failed = one_error_line(run([*export, f"--onnx_path={tmp_path}/no_such_folder/p.onnx"], tmp_path), status=1)
    assert failed.startswith(f"sf: error: cannot export exp to {tmp_path}/no_such_folder/p.onnx: "), failed
