"""What a run says about its precision: the choice and its reason in the run's settings (and so in config.json), a
resumed run keeping the precision it started with (or warning that it changed), and the request, not the driver's
resolution, travelling to other nodes so each resolves it on its own hardware."""

from __future__ import annotations

import argparse
import json
import logging

import numpy as np
import pytest

from sf import train
from sf.cfg.arguments import default_cfg
from sf.envs.spaces import EnvInfo
from sf.model import precision
from sf.runner.build import precision_choice
from sf.runner.settings import resolve_settings

IMAGES = EnvInfo({"obs": ((3, 72, 128), np.dtype(np.uint8))}, None, 1.0, 4)
VECTORS = EnvInfo({"obs": ((4,), np.dtype(np.float32))}, None, 1.0, 1)


def _cfg(tmp_path, cli: dict | None = None, **overrides) -> argparse.Namespace:
    cfg = default_cfg(train_dir=str(tmp_path), experiment="run", serial_mode=True, **overrides)
    cfg.cli_args = cli or {}
    return cfg


def _resolve(cfg, env_info=IMAGES) -> tuple[argparse.Namespace, dict]:
    """The config as the run starts with it and the precision in use (config.json's `precision_in_use`)."""
    previous = train._previous_precision(cfg)
    train._restore_precision(cfg, env_info, previous)
    settings = resolve_settings(cfg, env_info, previous)
    return cfg, settings.config_entries()["precision_in_use"]


@pytest.mark.parametrize("amx", [True, False])
def test_the_choice_and_its_reason_go_to_the_config(tmp_path, monkeypatch, amx):
    monkeypatch.setattr(precision, "amx_available", lambda: amx)
    cfg, in_use = _resolve(_cfg(tmp_path, device="cpu"))
    assert cfg.precision == "auto"  # the request stays: other processes and nodes resolve it themselves
    assert in_use["used"] == "fp32" and in_use["amx"] is amx
    assert ("AMX found" if amx else "no AMX") in in_use["reason"]
    _, vector_run = _resolve(_cfg(tmp_path, precision="bf16", device="cpu"), VECTORS)
    assert vector_run["used"] == "fp32" and "no image encoder" in vector_run["reason"]


def test_a_resumed_run_keeps_its_precision_unless_told_otherwise(tmp_path, caplog):
    (tmp_path / "run").mkdir()
    started = {"precision": "bf16", "precision_in_use": {"used": "bf16", "requested": "bf16"}}
    (tmp_path / "run" / "config.json").write_text(json.dumps(started))
    kept, in_use = _resolve(_cfg(tmp_path, restart_behavior="resume", device="cpu"))
    assert kept.precision == "bf16" and in_use["used"] == "bf16"
    assert "as the run being resumed" in in_use["reason"]

    with caplog.at_level(logging.WARNING, logger="sf"):
        flags = {"precision": "fp32"}
        _, changed = _resolve(_cfg(tmp_path, flags, restart_behavior="resume", precision="fp32", device="cpu"))
    assert changed["used"] == "fp32"
    assert "precision changed on resume: the run started in bf16 and continues in fp32" in caplog.text

    # configs written before precision_in_use held the resolved value in `precision`
    (tmp_path / "run" / "config.json").write_text(json.dumps({"precision": "bf16"}))
    assert _resolve(_cfg(tmp_path, restart_behavior="resume", device="cpu"))[1]["used"] == "bf16"
    assert _resolve(_cfg(tmp_path, restart_behavior="restart", device="cpu"))[1]["used"] == "fp32"


def test_each_node_resolves_the_request_on_its_own_hardware(tmp_path, monkeypatch):
    """The driver resolves for itself and leaves the request in the config that `RayPlacement.start_links` copies
    to every node; a node's agent resolves that request with its own CPU's answer."""
    monkeypatch.setattr(precision, "amx_available", lambda: False)
    driver, in_use = _resolve(_cfg(tmp_path, {"precision": "bf16"}, precision="bf16", device="cpu"))
    assert "emulated" in in_use["reason"]
    shipped = argparse.Namespace(**vars(driver))  # what a node receives
    monkeypatch.setattr(precision, "amx_available", lambda: True)
    node = precision_choice(shipped, IMAGES, "cpu")
    assert node.used == "bf16" and node.amx and "AMX found" in node.reason
