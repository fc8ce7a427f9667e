"""The env-family table: every family's modules and functions exist, an env name finds its family by the longest
prefix, and another package can add one."""

from __future__ import annotations

import importlib

import pytest

from sf.envs import families as fam
from sf.envs import registry
from sf.envs.families import EnvFamily, family_named, family_of, register_family


@pytest.mark.parametrize("family", fam.families(), ids=lambda f: f.name)
def test_every_family_names_modules_and_functions_that_exist(family):
    for module in (family.train_module, family.enjoy_module):
        if module:
            assert callable(importlib.import_module(module).main)
    for spec in (family.register, family.defaults, family.add_args):
        if spec:
            assert callable(fam._load(spec))


def test_an_env_name_finds_its_family_by_the_longest_prefix():
    assert family_of("doom_basic").name == "vizdoom"
    assert family_of("mujoco_ant").name == "mujoco"
    assert family_of("sleepy_cartpole_500us").name == "sleepy"
    assert family_of("CartPole-v1").name == "gym"


def test_a_registered_family_takes_its_names(monkeypatch):
    monkeypatch.setattr(fam, "_FAMILIES", dict(fam._FAMILIES))
    atari = EnvFamily("atari", "atari_", "pkg.train_atari", None, "pkg.atari:register")
    register_family(atari)
    assert family_of("atari_breakout") is atari and family_named("atari") is atari
    assert family_of("doom_basic").name == "vizdoom"


def test_a_family_builds_the_config_its_script_builds(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))  # the registrations stay in this test
    cfg = family_named("mujoco").parse_cfg(["--env=mujoco_ant"])
    assert cfg.use_rnn is False and cfg.encoder_mlp_layers == [64, 64]  # the family's defaults
    assert "mujoco_ant" in registry.registered_envs()
