"""The experiment folder: config.json, summary.json, profile.json, TensorBoard events (and, with --with_wandb,
the same scalars in Weights & Biases), the log file."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

from tensorboardX import SummaryWriter

from sf.experiment.durable import replace_file
from sf.experiment.lock import LOCK_FILE
from sf.profiling.live_feed import LIVE_FILE
from sf.profiling.series import SERIES_FILE

SCALARS_DIR = ".summary"  # TensorBoard event files, one folder per policy
PROFILING_DIR = "profiling"  # the profilers' outputs, where --profiling_output_dir does not put them elsewhere


class Experiment:
    def __init__(self, cfg):
        self.cfg = cfg
        self.dir = Path(cfg.train_dir) / cfg.experiment
        self.pid = os.getpid()
        if cfg.restart_behavior == "overwrite" and self.dir.exists():
            for old in self.dir.iterdir():  # all but the lock this run holds (`sf.experiment.lock`)
                if old.name == LOCK_FILE:
                    continue
                if old.is_dir() and not old.is_symlink():
                    shutil.rmtree(old)
                else:
                    old.unlink()
        if cfg.restart_behavior == "restart":
            live = [self.dir / LIVE_FILE, self.dir / f"{LIVE_FILE}.1"]  # a watcher would show the old run's history
            outputs = [self.dir / SCALARS_DIR, self.dir / SERIES_FILE, self.dir / PROFILING_DIR, *live]
            for old in [*self.dir.glob("checkpoint_p*"), *outputs]:
                if old.is_dir():
                    shutil.rmtree(old)
                else:
                    old.unlink(missing_ok=True)
        self.dir.mkdir(parents=True, exist_ok=True)
        for stale in self.dir.glob("*.json.tmp"):  # a write the previous run was killed in
            stale.unlink(missing_ok=True)
        self.writers: dict[int, SummaryWriter] = {}
        self.wandb = None
        if cfg.with_wandb:
            from sf.experiment.wandb_logger import WandbLogger

            self.wandb = WandbLogger(cfg, self.dir)

    def write_json(self, name: str, data) -> Path:
        """Atomic and durable, as a checkpoint: a reader never sees half a file, a crash keeps the previous version."""
        path = self.dir / name
        replace_file(path, json.dumps(_json_safe(data), indent=2).encode())
        return path

    def writer(self, policy_id: int) -> SummaryWriter:
        if policy_id not in self.writers:
            self.writers[policy_id] = SummaryWriter(
                str(self.dir / SCALARS_DIR / str(policy_id)), flush_secs=self.cfg.flush_summaries_interval
            )
        return self.writers[policy_id]

    def write_scalars(self, policy_id: int, step: int, scalars: dict[str, float]) -> None:
        writer = self.writer(policy_id)
        kept = {
            key: value
            for key, value in scalars.items()
            if value is not None and not (isinstance(value, float) and math.isnan(value))
        }
        for key, value in kept.items():
            writer.add_scalar(key, value, step)
        if self.wandb is not None:
            self.wandb.log(policy_id, step, kept)

    def write_histogram(self, policy_id: int, step: int, tag: str, counts: dict[int, int]) -> None:
        """A histogram of integer values (value -> count), one bucket per value."""
        values = sorted(counts)
        total = sum(counts.values())
        self.writer(policy_id).add_histogram_raw(
            tag,
            min=values[0],
            max=values[-1],
            num=total,
            sum=sum(v * c for v, c in counts.items()),
            sum_squares=sum(v * v * c for v, c in counts.items()),
            bucket_limits=[v + 0.5 for v in values],
            bucket_counts=[counts[v] for v in values],
            global_step=step,
        )

    def flush_scalars(self) -> None:
        for writer in self.writers.values():
            writer.flush()

    def close(self) -> None:
        for writer in self.writers.values():
            writer.close()
        self.writers = {}
        if self.wandb is not None:
            self.wandb.finish()
            self.wandb = None


def _json_safe(data):
    """JSON has no NaN and only string keys: NaN becomes null, keys become strings."""
    if isinstance(data, dict):
        return {str(k): _json_safe(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_json_safe(v) for v in data]
    if isinstance(data, float) and math.isnan(data):
        return None
    return data
