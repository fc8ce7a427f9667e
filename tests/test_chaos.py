"""The injection matrix (`python -m sf.chaos`) as a test: a few faults on CartPole in the default suite, the large
matrix over CartPole, VizDoom and a population under `make test-slow`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT

from sf.chaos.faults import FAULTS

# the one fault no other default test makes in a parallel run (healing is tests/test_healing.py's; the kills of the
# main process and of the whole group, foreign files beside them, tests/test_shm_ownership.py's)
SMALL = ("disk_full",)
LARGE_RUNS = 20 * len(FAULTS)  # every fault 20 times
IN_REPLACEMENT = tuple(name for name, fault in FAULTS.items() if fault.in_replacement)


def _matrix(tmp_path, runs: int, families: str, faults: tuple[str, ...], timeout_s: float) -> list[dict]:
    records = tmp_path / "records.json"
    proc = subprocess.run(
        [sys.executable, "-m", "sf.chaos", f"--runs={runs}", f"--families={families}", f"--faults={','.join(faults)}",
         f"--train_dir={tmp_path / 'runs'}", f"--json={records}", "--seed=1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    return json.loads(records.read_text())


def test_a_small_injection_matrix_ends_every_run_cleanly(tmp_path):
    records = _matrix(tmp_path, len(SMALL), "cartpole", SMALL, timeout_s=600)
    assert [r["fault"] for r in records] == list(SMALL)
    for r in records:
        assert r["end_s"] is not None and r["end_s"] < 5.0, r
        assert not r["processes_left"] and not r["shm_left"] and not r["foreign_removed"] and not r["problems"], r
    (disk_full,) = records
    assert disk_full["exit_code"] == 1 and disk_full["status"] == "error", disk_full
    assert disk_full["error"].startswith("Learner 0: CheckpointError: cannot save checkpoint "), disk_full


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_fault_while_a_population_copies_weights_loses_no_checkpoint(tmp_path):
    """SIGKILL of the main process or of the learner taking another policy's weights, within 0.3 s of the
    replacement's log line: every policy's newest checkpoint loads, and the resume continues each from it."""
    records = _matrix(tmp_path, 3 * len(IN_REPLACEMENT), "pbt", IN_REPLACEMENT, timeout_s=1200)
    assert [r["fault"] for r in records] == list(IN_REPLACEMENT) * 3
    for r in records:
        assert not r["problems"] and r["end_s"] < 5.0 and r["resumed_from"] not in (None, "-"), r
    assert {r["target"] for r in records if r["fault"] == "sigkill_learner_in_replacement"} <= {
        "Learner 0",
        "Learner 1",
    }


@pytest.mark.slow
@pytest.mark.timeout(5 * 3600)  # 260 runs of several seconds each: far beyond the suite's default of 600 s
def test_the_large_injection_matrix_over_cartpole_vizdoom_and_a_population(tmp_path):
    pytest.importorskip("vizdoom")
    records = _matrix(tmp_path, LARGE_RUNS, "cartpole,doom,pbt", tuple(FAULTS), timeout_s=5 * 3600)
    assert len(records) >= 20 * (len(FAULTS) - 1) and all(not r["problems"] for r in records)
