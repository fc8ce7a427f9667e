"""Checkpoints under `<experiment>/checkpoint_p<i>/`, durable and never lost to rotation or a bad write.

- A save serializes in memory, writes `<name>.tmp`, fsyncs it, renames it over `<name>` and fsyncs the folder: a
  crash at any point leaves either the new file whole or the old set untouched. A save that fails (disk full) raises
  CheckpointError naming the file and the cause, after removing its temporary file; the files before it stay.
- Newest means the highest version (then env frames), read from the name, which the contents must confirm: never
  a file time, which a copy (`cp -r`, `scp`, a sync) does not keep. Rotation keeps the newest `--keep_checkpoints`
  and never deletes one newer than the file just written. A run resumed from an older checkpoint (the best one, or
  the one before a damaged newest) first moves the newer ones aside into `superseded/` (`set_aside_newer`), so that
  its own saves are the newest from then on.
- Loading takes the newest file that loads (`torch.load(weights_only=True)`: tensors, numbers and strings only, so
  a checkpoint folder someone else wrote cannot run code) and holds what a training state needs, whose version and
  frames are the ones its name gives; a truncated, corrupt or misnamed newer one is named in a warning and skipped.
- `*.tmp` files a killed save left behind are removed when a learner starts (`remove_stale`).

With `--save_milestones_sec`, a checkpoint that far from the last milestone is also kept for good in `milestones/`;
with `--save_best_*`, the best policy so far as `best_<version>_<env frames>_<metric>_<value>.pth` (one kept),
the file `--load_checkpoint_kind=best` loads. Names keep Sample Factory's `checkpoint_<version>_<env frames>.pth`.
"""

from __future__ import annotations

import io
import logging
import math
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from sf.experiment.durable import TMP_SUFFIX, fsync_dir, replace_file

log = logging.getLogger("sf")

BEST_MARGIN = 1e-3  # a new best must beat the old one by more than this (Sample Factory's 3 significant digits)
KIND_PREFIX = {"latest": "checkpoint", "best": "best"}
_VERSION_IN_NAME = re.compile(r"^(?:checkpoint|best)_(\d+)_(\d+)(?:_.*)?\.pth$")
SUPERSEDED_DIR = "superseded"
STATE_KEYS = ("model", "optimizer", "env_steps", "version")


class CheckpointError(Exception):
    """A checkpoint that cannot be written or read: the message names the file and the cause, on one line."""


@dataclass(frozen=True)
class Loaded:
    path: Path
    state: dict


def checkpoint_dir(experiment_dir: str | Path, policy_id: int) -> Path:
    return Path(experiment_dir) / f"checkpoint_p{policy_id}"


class CheckpointManager:
    def __init__(self, experiment_dir: str | Path, policy_id: int, keep: int, milestone_every_s: float = -1):
        self.dir = checkpoint_dir(experiment_dir, policy_id)
        self.keep = max(1, keep)
        self.milestone_every_s = milestone_every_s
        self.last_milestone = time.monotonic()
        self.best_value = -math.inf  # of the best policy saved so far; restored from checkpoints on resume

    def paths(self, kind: str = "latest") -> list[Path]:
        """Oldest first: by the version, then the env frames, in the name (files named otherwise are not ours)."""
        if not self.dir.is_dir():
            return []
        found = [path for path in self.dir.glob(f"{KIND_PREFIX[kind]}_*.pth") if version_of(path) is not None]
        return sorted(found, key=version_of)

    def set_aside_newer(self, than: Path) -> list[Path]:
        """Before a run continues from `than`: move the periodic checkpoints newer than it into `superseded/`, where
        they stay (the training they belong to is abandoned, not lost)."""
        mark = version_of(than)
        newer = [path for path in self.paths() if mark is not None and version_of(path) > mark]
        if newer:
            aside = self.dir / SUPERSEDED_DIR
            aside.mkdir(exist_ok=True)
            for path in newer:
                os.replace(path, aside / path.name)
            fsync_dir(self.dir)
            log.warning(
                "continuing from %s: the %d newer checkpoint(s) of policy %s moved to %s",
                than.name,
                len(newer),
                self.dir.name.removeprefix("checkpoint_p"),
                aside,
            )
        return newer

    def remove_stale(self) -> list[Path]:
        """Remove the temporary files of saves that never finished (the process was killed while writing)."""
        stale = sorted(self.dir.glob(f"*{TMP_SUFFIX}")) if self.dir.is_dir() else []
        for path in stale:
            path.unlink(missing_ok=True)
            log.warning("removed %s, left by a save that never finished", path)
        return stale

    # writing ------------------------------------------------------------------------------------------------
    def _write(self, state: dict, name: str) -> Path:
        path = self.dir / name
        buffer = io.BytesIO()
        torch.save(state, buffer)  # in memory first: a failing disk then surfaces as the OSError it is
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            replace_file(path, buffer.getbuffer())
        except OSError as exc:
            raise CheckpointError(f"cannot save checkpoint {path}: {_cause(exc)}") from None
        return path

    def save(self, state: dict, version: int, env_steps: int) -> Path:
        path = self._write(state, f"checkpoint_{version:09d}_{env_steps}.pth")
        now = time.monotonic()
        if self.milestone_every_s >= 0 and now - self.last_milestone >= self.milestone_every_s:
            self._keep_milestone(path)
            self.last_milestone = now
        older = [old for old in self.paths() if version_of(old) < version_of(path)]
        kept = self.keep - 1 - sum(version_of(other) > version_of(path) for other in self.paths())
        for old in older[: max(0, len(older) - kept)]:
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

    # reading ------------------------------------------------------------------------------------------------
    def load(self, kind: str = "latest", map_location: str = "cpu") -> dict | None:
        """The state of `newest(kind)`."""
        loaded = self.newest(kind, map_location)
        return loaded.state if loaded is not None else None

    def load_latest(self, map_location: str = "cpu") -> dict | None:
        return self.load("latest", map_location)

    def newest(self, kind: str = "latest", map_location: str = "cpu") -> Loaded | None:
        """The newest checkpoint of `kind` ("latest": the periodic ones, "best") that loads, None when there is none;
        CheckpointError when there are some and none loads."""
        paths = self.paths(kind)
        failures = []
        for path in reversed(paths):
            try:
                return Loaded(path, load_state(path, map_location))
            except CheckpointError as exc:
                failures.append(str(exc))
                log.warning("%s: skipped, trying the checkpoint saved before it", exc)
        if failures:
            raise CheckpointError(f"none of the {len(paths)} checkpoints in {self.dir} loads; newest: {failures[0]}")
        return None


def load_state(path: Path, map_location: str = "cpu") -> dict:
    """A training state saved by `CheckpointManager`; CheckpointError naming the file when it does not load whole."""
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # truncated zip, bad pickle, a class weights_only refuses: each its own type
        raise CheckpointError(f"checkpoint {path} cannot be loaded (truncated or corrupt): {_cause(exc)}") from None
    if not isinstance(state, dict) or any(key not in state for key in STATE_KEYS):
        raise CheckpointError(f"checkpoint {path} is not a training state (no {', '.join(STATE_KEYS)})")
    named, held = version_of(path), (int(state["version"]), int(state["env_steps"]))
    if named is not None and named != held:
        raise CheckpointError(
            f"checkpoint {path} holds version {held[0]} at {held[1]} env frames, not what its name says"
        )
    return state


def version_of(path: Path) -> tuple[int, int] | None:
    """(version, env frames) from a checkpoint's name; None for a name of another form."""
    match = _VERSION_IN_NAME.match(path.name)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _cause(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror} (errno {exc.errno})"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"
