"""config.json, the run's full resolved config: the one module that writes it and reads it back.

It is the flags of the run (`cfg`, as given and defaulted) with what the run resolved at its start on top (the
inference placement `auto` became, the precision in use: `sf.runner.settings`), written durably before any component
starts. Resume compares it with the new flags, enjoy and export rebuild the model from it, the report and the live
view read the placement from it, W&B keeps its run id in it.
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

from sf.cfg.arguments import cfg_to_dict, load_cfg_json
from sf.experiment.durable import replace_file

CONFIG_FILE = "config.json"


class UnreadableConfig(ValueError):
    """config.json exists but is not a JSON object (a damaged or foreign file)."""


def config_path(experiment_dir: str | Path) -> Path:
    return Path(experiment_dir) / CONFIG_FILE


def write_config(experiment_dir: str | Path, cfg, resolved: dict[str, Any] | None = None) -> Path:
    """Durably: a reader never sees half a file, a crash keeps the previous version."""
    path = config_path(experiment_dir)
    replace_file(path, json.dumps({**cfg_to_dict(cfg), **(resolved or {})}, indent=2).encode())
    return path


def read_config(experiment_dir: str | Path) -> dict[str, Any] | None:
    """The saved config as a dict; None where there is none; `UnreadableConfig` where it cannot be read."""
    path = config_path(experiment_dir)
    try:
        config = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise UnreadableConfig(f"{path} cannot be read ({exc})") from None
    if not isinstance(config, dict):
        raise UnreadableConfig(f"{path} cannot be read (not a JSON object)")
    return config


def read_config_or_empty(experiment_dir: str | Path) -> dict[str, Any]:
    """For readers of a run that may still be starting or be damaged (the live view, the report): {} then."""
    try:
        return read_config(experiment_dir) or {}
    except UnreadableConfig:
        return {}


def load_config(experiment_dir: str | Path) -> argparse.Namespace:
    """The saved config as a namespace of flags (flags added to sf since it was written get their defaults)."""
    return load_cfg_json(config_path(experiment_dir))


def keep_previous_config(experiment_dir: str | Path) -> Path | None:
    """Before a resumed run with another config writes its own: the old config.json, renamed after its time."""
    path = config_path(experiment_dir)
    if not path.is_file():
        return None
    stamp = datetime.fromtimestamp(path.stat().st_mtime).strftime("%Y%m%d-%H%M%S")
    kept = path.with_name(f"config.{stamp}.json")
    os.replace(path, kept)
    return kept
