"""Checkpoints under `<experiment>/checkpoint_p<i>/`, written atomically, newest `--keep_checkpoints` kept."""
from __future__ import annotations

import os
from pathlib import Path

import torch


class CheckpointManager:
    def __init__(self, experiment_dir: str | Path, policy_id: int, keep: int):
        self.dir = Path(experiment_dir) / f"checkpoint_p{policy_id}"
        self.keep = max(1, keep)

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
        for old in self.paths()[: -self.keep]:
            old.unlink(missing_ok=True)
        return path

    def load_latest(self, map_location: str = "cpu") -> dict | None:
        paths = self.paths()
        if not paths:
            return None
        return torch.load(paths[-1], map_location=map_location, weights_only=False)
