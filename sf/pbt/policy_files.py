"""Each policy's current hyperparameters and reward shaping in the experiment folder, under Sample Factory's names:
`policy_<id, 2 digits>_cfg.json` (flag name -> value) and `policy_<id>_reward_shaping.json` (the env's scheme, or
null). Written at the start of a run and after every change; a resumed run reads them back, and files put there
before a run's first start give its policies their first values.

The two files of a policy change together: a crash between them must not leave one policy's new hyperparameters beside
its old shaping. Each pair is written as a small journal: both new files first, whole, as `<name>.next`
(`sf.experiment.durable`), then renamed over the old ones, the hyperparameters' first. A reader settles what a crash
left before it reads (`settle`): both `.next` files still there means the renames had not begun (the old pair stands,
the new files go); only the shaping's means the hyperparameters' was renamed (the shaping's rename is finished).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from sf.experiment.durable import TMP_SUFFIX, fsync_dir, replace_file
from sf.runtime.learner import PER_POLICY_HYPERPARAMETERS
from sf.utils.errors import ConfigError

NEXT_SUFFIX = ".next"  # a policy's new file, whole, waiting for its pair to be written too


def cfg_file(folder: Path, policy_id: int) -> Path:
    return Path(folder) / f"policy_{policy_id:02d}_cfg.json"


def shaping_file(folder: Path, policy_id: int) -> Path:
    return Path(folder) / f"policy_{policy_id:02d}_reward_shaping.json"


def write(folder: Path, policy_id: int, hyperparameters: dict, shaping: dict | None) -> None:
    """Both files of the policy, as one: a crash at any point leaves the old pair or the new one (once settled)."""
    cfg, scheme = cfg_file(folder, policy_id), shaping_file(folder, policy_id)
    replace_file(_next(cfg), json.dumps(hyperparameters, indent=2).encode())
    replace_file(_next(scheme), json.dumps(shaping, indent=2).encode())
    os.replace(_next(cfg), cfg)
    os.replace(_next(scheme), scheme)
    fsync_dir(Path(folder))


def settle(folder: Path, policy_id: int) -> None:
    """Finish or undo the write a crash interrupted (see the module's docstring), so that the pair is one write's."""
    cfg, scheme = cfg_file(folder, policy_id), shaping_file(folder, policy_id)
    for path in (cfg, scheme):  # a new file cut short as it was written
        _next(path).with_name(_next(path).name + TMP_SUFFIX).unlink(missing_ok=True)
    if _next(cfg).exists():  # the renames had not begun: the old pair stands
        _next(cfg).unlink()
        _next(scheme).unlink(missing_ok=True)
    elif _next(scheme).exists():  # the hyperparameters are the new ones: so must the shaping be
        os.replace(_next(scheme), scheme)
    else:
        return
    fsync_dir(Path(folder))


def _next(path: Path) -> Path:
    return path.with_name(path.name + NEXT_SUFFIX)


def read_hyperparameters(folder: Path, policy_id: int) -> dict[str, float] | None:
    """The policy's saved hyperparameters; None when there is no file. ConfigError, naming the file, for one that
    does not hold per-policy hyperparameters as numbers."""
    settle(folder, policy_id)
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
    settle(folder, policy_id)
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
