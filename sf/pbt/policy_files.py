"""Each policy's current hyperparameters and reward shaping in the experiment folder, under Sample Factory's names:
`policy_<id, 2 digits>_cfg.json` (flag name -> value) and `policy_<id>_reward_shaping.json` (the env's scheme, or
null). Written whole or not at all (`sf.experiment.durable`) at the start of a run and after every change; a resumed
run reads them back, and files put there before a run's first start give its policies their first values.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from sf.experiment.durable import replace_file
from sf.runtime.learner import PER_POLICY_HYPERPARAMETERS
from sf.utils.errors import ConfigError


def cfg_file(folder: Path, policy_id: int) -> Path:
    return Path(folder) / f"policy_{policy_id:02d}_cfg.json"


def shaping_file(folder: Path, policy_id: int) -> Path:
    return Path(folder) / f"policy_{policy_id:02d}_reward_shaping.json"


def write(folder: Path, policy_id: int, hyperparameters: dict, shaping: dict | None) -> None:
    replace_file(cfg_file(folder, policy_id), json.dumps(hyperparameters, indent=2).encode())
    replace_file(shaping_file(folder, policy_id), json.dumps(shaping, indent=2).encode())


def read_hyperparameters(folder: Path, policy_id: int) -> dict[str, float] | None:
    """The policy's saved hyperparameters; None when there is no file. ConfigError, naming the file, for one that
    does not hold per-policy hyperparameters as numbers."""
    path = cfg_file(folder, policy_id)
    data = _read(path)
    if data is None:
        return None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: must hold an object of hyperparameters, got {type(data).__name__}")
    unknown = sorted(set(data) - set(PER_POLICY_HYPERPARAMETERS))
    if unknown:
        raise ConfigError(
            f"{path}: {', '.join(unknown)} is not a per-policy hyperparameter "
            f"(those are: {', '.join(PER_POLICY_HYPERPARAMETERS)})"
        )
    for key, value in data.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ConfigError(f"{path}: {key} must be a finite number, got {value!r}")
    return {key: float(value) for key, value in data.items()}


def read_shaping(folder: Path, policy_id: int) -> tuple[bool, dict | None]:
    """(whether the file exists, the scheme it holds: an object or null)."""
    path = shaping_file(folder, policy_id)
    if not path.exists():
        return False, None
    data = _read(path)
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"{path}: must hold an object of reward shaping coefficients or null")
    return True, data


def _read(path: Path) -> Any:
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot be read as JSON ({exc})") from None
