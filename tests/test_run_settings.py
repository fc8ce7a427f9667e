"""A run reads its config and never writes it: what it resolves at its start (the device, the precision in use, where
inference runs) lives in `RunSettings` and in config.json, and the config a script handed to `run_rl` holds the same
values after the run."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import LAYOUT, ROOT, run_sf


@pytest.mark.parametrize(
    "serial", [pytest.param(True, marks=pytest.mark.slow), False], ids=["serial", "parallel"]
)  # the parallel run resolves more (its inference placement): the default test
def test_a_run_leaves_its_config_as_given_and_config_json_says_what_it_resolved(tmp_path, serial):
    flags = [*LAYOUT, "--env=CartPole-v1", f"--train_dir={tmp_path}", "--experiment=exp", f"--serial_mode={serial}"]
    flags += ["--train_for_env_steps=2048", "--inference_placement=auto"]
    result = run_sf(flags, module=None, script=[sys.executable, str(ROOT / "tests" / "settings_run.py")])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {"status": 0, "changed": []}
    saved = json.loads((tmp_path / "exp" / "config.json").read_text())
    # a 32x32 MLP on the CPU with one inference worker per policy: inference goes into the rollout workers
    assert saved["inference_placement"] == ("auto" if serial else "rollout_worker")
    assert saved["precision_in_use"]["used"] == "fp32"
    assert "no image encoder" in saved["precision_in_use"]["reason"]
    assert json.loads((tmp_path / "exp" / "summary.json").read_text())["status"] == "ok"
