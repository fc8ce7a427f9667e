"""ONNX export against the torch policy it came from: on 100 observations recorded by playing the env, onnxruntime's
actions, distribution parameters, values and recurrent states equal torch's within 1e-5, for an MLP, a conv encoder
with a GRU, and a registered custom encoder; and the module's command line writes the file from an experiment."""

from __future__ import annotations

from pathlib import Path

import gymnasium
import numpy as np
import pytest
import torch
from conftest import write_experiment

from sf.cfg.arguments import parse_full_cfg
from sf.envs import EnvAdapter, EnvConfig, create_env, register_env
from sf.envs.spaces import EnvInfo
from sf.export_onnx import export_onnx, input_names, main
from sf.runner.build import build_model

ort = pytest.importorskip("onnxruntime")
STEPS = 100
TOLERANCE = 1e-5


class Blink(gymnasium.Env):
    """40 x 40 RGB frames (uint8, channels last as envs give them) whose pattern moves with the step and the action."""

    observation_space = gymnasium.spaces.Box(0, 255, (40, 40, 3), np.uint8)
    action_space = gymnasium.spaces.Discrete(3)

    def __init__(self, *args, **kwargs):
        self.t = 0

    def _obs(self) -> np.ndarray:
        rows, cols = np.meshgrid(np.arange(40), np.arange(40), indexing="ij")
        return np.stack(
            [(rows * 7 + self.t * 13) % 256, (cols * 5 + self.t * 3) % 256, (rows * cols) % 256], -1
        ).astype(np.uint8)

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1 + int(action)
        return self._obs(), float(action == 1), False, self.t >= 60, {}


CASES = {
    "mlp": ("CartPole-v1", ["--use_rnn=False", "--encoder_mlp_layers", "32", "32", "--nonlinearity=tanh"]),
    "conv_gru": (
        "blink",
        ["--encoder_conv_architecture=convnet_simple", "--encoder_conv_mlp_layers", "32"]
        + ["--use_rnn=True", "--rnn_type=gru", "--rnn_size=16", "--nonlinearity=elu"],
    ),
    "custom_encoder": ("collect", ["--use_rnn=False", "--set_encoder_width=16"]),
}


def _register(env: str) -> None:
    if env == "blink":
        register_env("blink", lambda *args, **kwargs: Blink())
    elif env == "collect":
        from sf_examples.custom_model.train_custom_model import register_custom_components

        register_custom_components()
    else:
        from sf.envs.gym_family import register_gym_env

        register_gym_env(env)


def _add_args(env: str):
    if env == "collect":
        from sf_examples.custom_model.train_custom_model import add_custom_model_args

        return add_custom_model_args
    return None


def _experiment(tmp_path: Path, env: str, flags: list[str]) -> tuple[list[str], EnvInfo, torch.nn.Module]:
    """An experiment folder as training leaves one: config.json and a checkpoint of a model whose normalizers have
    moved (so the exported graph must carry them)."""
    argv = [f"--env={env}", f"--train_dir={tmp_path}", "--experiment=exp", "--normalize_input=True", *flags]
    cfg = parse_full_cfg([*argv, "--normalize_returns=True", "--seed=3"], add_args=_add_args(env))
    env_ = EnvAdapter(create_env(env, cfg, EnvConfig()), 1)
    info = EnvInfo(env_.obs_spec, env_.action_spec, 1.0, 1)
    env_.reset(seed=1)
    obs = [env_.random_steps(3, seed=i) for i in range(8)]
    env_.close()
    model = build_model(cfg, info, "cpu")
    batch = {k: torch.as_tensor(np.stack([o[k] for o in obs])) for k in info.obs_spec}
    model.normalize_obs(batch, update=True)
    model.returns_normalizer.update(torch.randn(64) * 3 + 1)
    write_experiment(tmp_path / "exp", cfg, model)
    return argv, info, model


def _play(env_name: str, cfg, model, info: EnvInfo) -> list[dict]:
    """STEPS observations of the env played by the torch policy, with what torch computes for each (its recurrent
    state carried from step to step)."""
    env = EnvAdapter(create_env(env_name, cfg, EnvConfig()), 1)
    obs, rnn = env.reset(seed=2), torch.zeros(1, model.rnn_state_size)
    records = []
    with torch.no_grad():
        for _ in range(STEPS):
            batch = {k: torch.as_tensor(v).unsqueeze(0) for k, v in obs.items()}
            core, new_rnn = model.forward_core(
                model.forward_head(model.normalize_obs(batch)), rnn if model.rnn_state_size else None
            )
            logits, values = model.forward_tail(core)
            values = model.returns_normalizer.denormalize(values)
            actions = model.action_distribution(logits).deterministic()
            records.append(
                dict(obs=obs, rnn=rnn.numpy(), actions=actions, logits=logits, values=values, new_rnn=new_rnn)
            )
            obs, _, terminated, truncated, _ = env.step(actions[0].numpy())
            rnn = new_rnn if not (terminated or truncated) else torch.zeros_like(rnn)
            if terminated or truncated:
                obs = env.reset()
    env.close()
    return records


@pytest.mark.parametrize("case", list(CASES))
def test_onnxruntime_matches_torch_on_recorded_observations(case, tmp_path):
    env, flags = CASES[case]
    _register(env)
    argv, info, _ = _experiment(tmp_path, env, flags)
    cfg = parse_full_cfg(argv, add_args=_add_args(env), evaluation=True)
    path = tmp_path / "policy.onnx"
    assert export_onnx(cfg, path) == 0
    from sf.enjoy import load_policy, merged_cfg

    model = load_policy(merged_cfg(cfg), info, "cpu")
    records = _play(env, cfg, model, info)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    assert names == input_names(info, model.rnn_state_size)
    worst = 0.0
    ort_rnn = np.zeros((1, model.rnn_state_size), np.float32)
    for i, record in enumerate(records):
        feed = {k: record["obs"][k][None] for k in info.obs_spec}
        if model.rnn_state_size:  # onnxruntime's own state from step to step, reset where the episode ended
            feed["rnn_states"] = ort_rnn if i == 0 or record["rnn"].any() else np.zeros_like(ort_rnn)
        outputs = session.run(None, feed)
        expected = [record["actions"], record["logits"], record["values"]] + (
            [record["new_rnn"]] if model.rnn_state_size else []
        )
        for got, want in zip(outputs, expected):
            worst = max(worst, float(np.abs(got - want.numpy()).max()))
        if model.rnn_state_size:
            ort_rnn = outputs[3]
    print(f"{case}: largest difference {worst:.2e} over {STEPS} steps")
    assert worst <= TOLERANCE, worst
    if not model.rnn_state_size:  # the batch dimension is free: all 100 in one call give the same answers
        batch = {k: np.stack([r["obs"][k] for r in records]) for k in info.obs_spec}
        values = session.run(["output_values"], batch)[0]
        np.testing.assert_allclose(
            values, np.concatenate([r["values"].numpy() for r in records]), atol=TOLERANCE, rtol=0
        )


def test_the_command_line_writes_the_policy_of_an_experiment(tmp_path, capsys):
    _register("CartPole-v1")
    argv, _, _ = _experiment(tmp_path, "CartPole-v1", CASES["mlp"][1])
    out = tmp_path / "cartpole.onnx"
    assert main([*argv, f"--onnx_path={out}"]) == 0
    assert [o.name for o in ort.InferenceSession(str(out)).get_outputs()] == [
        "output_actions",
        "output_action_logits",
        "output_values",
    ]
    capsys.readouterr()
    assert main(["--env=CartPole-v1", f"--train_dir={tmp_path}", "--experiment=nothing_here"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("sf: error: --experiment: no experiment at") and "nothing_here" in err[0]
