"""Checkpoints under `<experiment>/checkpoint_p<i>/`, written atomically, newest `--keep_checkpoints` kept;
with `--save_milestones_sec`, a checkpoint that far from the last milestone is also kept for good in `milestones/`;
with `--save_best_*`, the best policy so far as `best_<version>_<env frames>_<metric>_<value>.pth` (one kept),
the file `--load_checkpoint_kind=best` loads."""

from __future__ import annotations

import math
import os
import shutil
import time
from pathlib import Path

import torch

BEST_MARGIN = 1e-3  # a new best must beat the old one by more than this (Sample Factory's 3 significant digits)
KIND_PREFIX = {"latest": "checkpoint", "best": "best"}


class CheckpointManager:
    def __init__(self, experiment_dir: str | Path, policy_id: int, keep: int, milestone_every_s: float = -1):
        self.dir = Path(experiment_dir) / f"checkpoint_p{policy_id}"
        self.keep = max(1, keep)
        self.milestone_every_s = milestone_every_s
        self.last_milestone = time.monotonic()
        self.best_value = -math.inf  # of the best policy saved so far; restored from checkpoints on resume

    def paths(self, kind: str = "latest") -> list[Path]:
        """Oldest first: names embed the zero-padded policy version."""
        if not self.dir.is_dir():
            return []
        return sorted(self.dir.glob(f"{KIND_PREFIX[kind]}_*.pth"))

    def _write(self, state: dict, name: str) -> Path:
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / name
        tmp = path.with_suffix(".pth.tmp")
        torch.save(state, tmp)
        os.replace(tmp, path)
        return path

    def save(self, state: dict, version: int, env_steps: int) -> Path:
        path = self._write(state, f"checkpoint_{version:09d}_{env_steps}.pth")
        now = time.monotonic()
        if self.milestone_every_s >= 0 and now - self.last_milestone >= self.milestone_every_s:
            self._keep_milestone(path)
            self.last_milestone = now
        for old in self.paths()[: -self.keep]:
            old.unlink(missing_ok=True)
        return path

    def save_if_best(self, state: dict, version: int, env_steps: int, metric: str, value: float) -> Path | None:
        """Save `state` as the best policy when `value` beats the best so far by more than BEST_MARGIN."""
        if not value - self.best_value > BEST_MARGIN:
            return None
        self.best_value = value
        path = self._write(
            {**state, "best_performance": value}, f"best_{version:09d}_{env_steps}_{metric}_{value:.3f}.pth"
        )
        for old in self.paths("best"):
            if old != path:
                old.unlink(missing_ok=True)
        return path

    def _keep_milestone(self, path: Path) -> None:
        """A hard link costs no copy and outlives the rotation of `path`; a copy where links are not possible."""
        milestones = self.dir / "milestones"
        milestones.mkdir(exist_ok=True)
        try:
            os.link(path, milestones / path.name)
        except OSError:
            shutil.copy2(path, milestones / path.name)

    def load(self, kind: str = "latest", map_location: str = "cpu") -> dict | None:
        """The newest checkpoint of `kind` ("latest": the periodic ones, "best"), or None when there is none."""
        paths = self.paths(kind)
        if not paths:
            return None
        return torch.load(paths[-1], map_location=map_location, weights_only=False)

    def load_latest(self, map_location: str = "cpu") -> dict | None:
        return self.load("latest", map_location)
