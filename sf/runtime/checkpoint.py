"""Checkpoints under `<experiment>/checkpoint_p<i>/`, written atomically, newest `--keep_checkpoints` kept;
with `--save_milestones_sec`, a checkpoint that far from the last milestone is also kept for good in `milestones/`."""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import torch


class CheckpointManager:
    def __init__(self, experiment_dir: str | Path, policy_id: int, keep: int, milestone_every_s: float = -1):
        self.dir = Path(experiment_dir) / f"checkpoint_p{policy_id}"
        self.keep = max(1, keep)
        self.milestone_every_s = milestone_every_s
        self.last_milestone = time.monotonic()

    def paths(self) -> list[Path]:
        """Oldest first: names embed the zero-padded policy version."""
        if not self.dir.is_dir():
            return []
        return sorted(self.dir.glob("checkpoint_*.pth"))

    def save(self, state: dict, version: int, env_steps: int) -> Path:
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / f"checkpoint_{version:09d}_{env_steps}.pth"
        tmp = path.with_suffix(".pth.tmp")
        torch.save(state, tmp)
        os.replace(tmp, path)
        now = time.monotonic()
        if self.milestone_every_s >= 0 and now - self.last_milestone >= self.milestone_every_s:
            self._keep_milestone(path)
            self.last_milestone = now
        for old in self.paths()[: -self.keep]:
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

    def load_latest(self, map_location: str = "cpu") -> dict | None:
        paths = self.paths()
        if not paths:
            return None
        return torch.load(paths[-1], map_location=map_location, weights_only=False)
