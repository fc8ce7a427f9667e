"""Checkpoints you cannot lose: durable writes, newest by version (never by file time), rotation that never deletes
a newer one, the newest file that loads, failed saves that name their file and cause and leave the previous ones
whole."""

from __future__ import annotations

import multiprocessing as mp
import os
import resource
import stat
from pathlib import Path

import pytest
import torch

from sf.experiment.checkpoint import CheckpointError, CheckpointManager, load_state


def _state(version: int) -> dict:
    return {"model": {"w": torch.full((64,), float(version))}, "optimizer": {}, "env_steps": version * 100,
            "version": version}  # fmt: skip


def _save(manager: CheckpointManager, *versions: int) -> None:
    for version in versions:
        manager.save(_state(version), version, version * 100)


def _names(manager: CheckpointManager) -> list[str]:
    return [p.name for p in manager.paths()]


def test_rotation_keeps_the_newest_and_loads_it(tmp_path):
    manager = CheckpointManager(tmp_path, 0, keep=2)
    _save(manager, 1, 2, 3)
    assert _names(manager) == ["checkpoint_000000002_200.pth", "checkpoint_000000003_300.pth"]
    assert manager.load_latest()["version"] == 3
    assert not (manager.dir / "milestones").exists()
    assert not list(manager.dir.glob("*.tmp"))


def test_a_run_resumed_from_an_older_checkpoint_sets_the_newer_ones_aside_and_its_saves_are_the_newest(tmp_path):
    """Periodic checkpoints 100 and 101 exist; a run resumed from the best policy at version 50 saves 51, 52, ...:
    100 and 101 go into superseded/ (kept, not deleted), and a later resume continues from 52."""
    manager = CheckpointManager(tmp_path, 0, keep=2)
    _save(manager, 100, 101)
    best = manager.save_if_best(_state(50), 50, 5000, "reward", 1.0)
    resumed = CheckpointManager(tmp_path, 0, keep=2)
    moved = resumed.set_aside_newer(best)
    assert [p.name for p in moved] == ["checkpoint_000000100_10000.pth", "checkpoint_000000101_10100.pth"]
    assert sorted(p.name for p in (manager.dir / "superseded").iterdir()) == [p.name for p in moved]
    _save(resumed, 51, 52, 53)
    assert _names(resumed) == ["checkpoint_000000052_5200.pth", "checkpoint_000000053_5300.pth"]
    assert CheckpointManager(tmp_path, 0, keep=2).newest().state["version"] == 53


def test_a_copied_folder_resumes_from_its_highest_version_whatever_the_file_times(tmp_path):
    manager = CheckpointManager(tmp_path, 0, keep=3)
    _save(manager, 7, 8, 9)
    for age, path in enumerate(manager.paths()):  # copied without timestamps: the oldest save looks the newest
        os.utime(path, (1e9 - age * 3600, 1e9 - age * 3600))
    copy = CheckpointManager(tmp_path, 0, keep=3)
    assert copy.newest().state["version"] == 9
    _save(copy, 10)
    assert _names(copy) == [f"checkpoint_00000000{v}_{v * 100}.pth" for v in (8, 9)] + ["checkpoint_000000010_1000.pth"]


def test_rotation_never_deletes_a_checkpoint_newer_than_the_one_just_written(tmp_path):
    manager = CheckpointManager(tmp_path, 0, keep=2)
    _save(manager, 5, 6)
    _save(manager, 3)
    assert _names(manager) == ["checkpoint_000000003_300.pth", "checkpoint_000000005_500.pth",
                               "checkpoint_000000006_600.pth"]  # fmt: skip
    _save(manager, 4)  # again newer ones than itself: of the older, none is kept
    assert _names(manager) == ["checkpoint_000000004_400.pth", "checkpoint_000000005_500.pth",
                               "checkpoint_000000006_600.pth"]  # fmt: skip


def test_a_checkpoint_whose_contents_contradict_its_name_is_skipped(tmp_path, caplog):
    manager = CheckpointManager(tmp_path, 0, keep=3)
    _save(manager, 2)
    torch.save(_state(1), manager.dir / "checkpoint_000000009_900.pth")  # renamed by hand
    loaded = manager.newest()
    assert loaded.state["version"] == 2
    assert "checkpoint_000000009_900.pth" in caplog.text and "not what its name says" in caplog.text


def test_milestones_outlive_rotation(tmp_path):
    manager = CheckpointManager(tmp_path, 1, keep=1, milestone_every_s=0)
    _save(manager, 1, 2, 3)
    assert _names(manager) == ["checkpoint_000000003_300.pth"]
    milestones = sorted((manager.dir / "milestones").glob("checkpoint_*.pth"))
    assert [p.name for p in milestones] == [f"checkpoint_00000000{v}_{v}00.pth" for v in (1, 2, 3)]


def test_milestones_wait_for_their_interval(tmp_path):
    manager = CheckpointManager(tmp_path, 0, keep=1, milestone_every_s=3600)
    _save(manager, 1, 2, 3)
    assert not (manager.dir / "milestones").exists()


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty"])
def test_a_damaged_newest_checkpoint_is_named_and_skipped(tmp_path, caplog, damage):
    manager = CheckpointManager(tmp_path, 0, keep=3)
    _save(manager, 1, 2)
    newest = manager.paths()[-1]
    data = newest.read_bytes()
    newest.write_bytes({"truncated": data[: len(data) // 2], "garbage": os.urandom(len(data)), "empty": b""}[damage])
    loaded = manager.newest()
    assert loaded.path.name == "checkpoint_000000001_100.pth" and loaded.state["version"] == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and str(newest) in warnings[0] and "cannot be loaded" in warnings[0]


def test_when_no_checkpoint_loads_the_error_names_the_folder_and_the_newest(tmp_path):
    manager = CheckpointManager(tmp_path, 0, keep=3)
    _save(manager, 1)
    manager.paths()[0].write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match=r"none of the 1 checkpoints in .*checkpoint_p0 loads; newest: .*000001"):
        manager.newest()


class _NotATensor:
    pass


def test_loading_refuses_anything_but_tensors_numbers_and_strings(tmp_path):
    """weights_only: a checkpoint folder someone else wrote cannot run code when it is loaded."""
    path = tmp_path / "checkpoint_000000001_100.pth"
    torch.save({**_state(1), "extra": _NotATensor()}, path)
    with pytest.raises(CheckpointError, match="cannot be loaded"):
        load_state(path)


def test_a_save_writes_a_temporary_file_fsyncs_it_and_the_folder_then_renames(tmp_path, monkeypatch):
    synced = []

    def fsync(fd):
        synced.append("folder" if stat.S_ISDIR(os.fstat(fd).st_mode) else os.readlink(f"/proc/self/fd/{fd}"))

    monkeypatch.setattr(os, "fsync", fsync)
    path = CheckpointManager(tmp_path, 0, keep=2).save(_state(7), 7, 700)
    assert synced == [str(path) + ".tmp", "folder"]  # the data before the rename, the rename after it
    assert path.exists() and not Path(str(path) + ".tmp").exists()


def test_config_and_summary_are_written_like_a_checkpoint(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from sf.experiment.folder import Experiment

    synced = []
    monkeypatch.setattr(
        os, "fsync", lambda fd: synced.append("folder" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
    )
    experiment = Experiment.__new__(Experiment)
    experiment.dir = tmp_path
    path = experiment.write_json("config.json", SimpleNamespace(a=1).__dict__)
    assert synced == ["file", "folder"] and path.read_text() == '{\n  "a": 1\n}'


def test_stale_temporary_files_are_removed_at_start(tmp_path):
    manager = CheckpointManager(tmp_path, 0, keep=2)
    _save(manager, 1)
    stale = manager.dir / "checkpoint_000000002_200.pth.tmp"
    stale.write_bytes(b"half a checkpoint")
    assert manager.remove_stale() == [stale]
    assert _names(manager) == ["checkpoint_000000001_100.pth"] and not stale.exists()


def _save_on_a_full_disk(directory: str, result) -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))
    try:
        CheckpointManager(directory, 0, keep=1).save(_state(2), 2, 200)
        result.put("saved")
    except CheckpointError as exc:
        result.put(str(exc))


def test_a_save_on_a_full_disk_names_file_and_cause_and_keeps_the_previous_checkpoint(tmp_path):
    manager = CheckpointManager(tmp_path, 0, keep=1)
    _save(manager, 1)
    before = manager.paths()[0].read_bytes()
    ctx = mp.get_context("fork")  # the limit applies to the child alone
    result = ctx.Queue()
    child = ctx.Process(target=_save_on_a_full_disk, args=(str(tmp_path), result))
    child.start()
    message = result.get(timeout=60)
    child.join(timeout=60)
    failed = manager.dir / "checkpoint_000000002_200.pth"
    assert message == f"cannot save checkpoint {failed}: File too large (errno 27)"
    assert _names(manager) == ["checkpoint_000000001_100.pth"] and manager.paths()[0].read_bytes() == before
    assert not list(manager.dir.glob("*.tmp"))
