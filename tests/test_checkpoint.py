"""Checkpoint rotation and milestones."""

from __future__ import annotations

from sf.runtime.checkpoint import CheckpointManager


def _save_three(manager: CheckpointManager) -> None:
    for version in (1, 2, 3):
        manager.save({"version": version}, version, version * 100)


def test_rotation_keeps_the_newest_and_loads_it(tmp_path):
    manager = CheckpointManager(tmp_path, 0, keep=2)
    _save_three(manager)
    assert [p.name for p in manager.paths()] == ["checkpoint_000000002_200.pth", "checkpoint_000000003_300.pth"]
    assert manager.load_latest()["version"] == 3
    assert not (manager.dir / "milestones").exists()


def test_milestones_outlive_rotation(tmp_path):
    manager = CheckpointManager(tmp_path, 1, keep=1, milestone_every_s=0)
    _save_three(manager)
    assert [p.name for p in manager.paths()] == ["checkpoint_000000003_300.pth"]
    milestones = sorted((manager.dir / "milestones").glob("checkpoint_*.pth"))
    assert [p.name for p in milestones] == [f"checkpoint_00000000{v}_{v}00.pth" for v in (1, 2, 3)]


def test_milestones_wait_for_their_interval(tmp_path):
    manager = CheckpointManager(tmp_path, 0, keep=1, milestone_every_s=3600)
    _save_three(manager)
    assert not (manager.dir / "milestones").exists()
