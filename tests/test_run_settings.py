"""A run reads its config and never writes it: what it resolves at its start (the device, the precision in use, where
inference runs) lives in `RunSettings` and in config.json, and the config a script handed to `run_rl` is the same
object, with the same values, after the run."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from sf.cfg.arguments import parse_full_cfg
from sf.envs.gym_family import register_gym_env
from sf.train import run_rl
from sf_examples.train_gym_env import gym_defaults

from conftest import LAYOUT


def _cfg(tmp_path: Path, *extra: str):
    register_gym_env("CartPole-v1")
    flags = [*LAYOUT, "--env=CartPole-v1", f"--train_dir={tmp_path}", "--experiment=exp", *extra]
    return parse_full_cfg(flags, defaults=gym_defaults)


@pytest.mark.parametrize("serial", [True, False], ids=["serial", "parallel"])
def test_a_run_leaves_its_config_as_given_and_config_json_says_what_it_resolved(tmp_path, serial):
    cfg = _cfg(tmp_path, f"--serial_mode={serial}", "--train_for_env_steps=2048", "--inference_placement=auto")
    given = copy.deepcopy(vars(cfg))
    assert run_rl(cfg) == 0
    assert vars(cfg) == given
    saved = json.loads((tmp_path / "exp" / "config.json").read_text())
    # a 32x32 MLP on the CPU with one inference worker per policy: inference goes into the rollout workers
    assert saved["inference_placement"] == ("auto" if serial else "rollout_worker")
    assert saved["precision_in_use"]["used"] == "fp32"
    assert "no image encoder" in saved["precision_in_use"]["reason"]
    assert json.loads((tmp_path / "exp" / "summary.json").read_text())["status"] == "ok"
