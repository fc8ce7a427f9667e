"""A profile tool given a folder that is no finished run: one `sf: error:` line, the closest runs beside it named."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT


def _report(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sf.profile", "report", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_a_typo_in_the_experiment_folder_gets_did_you_mean(tmp_path):
    for name in ("cartpole_run", "doom_basic"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "profile.json").write_text("{}")
    (tmp_path / "unfinished").mkdir()
    result = _report(str(tmp_path / "cartpole_rn"))
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip() == (
        f"sf: error: experiment_dir: no folder {tmp_path / 'cartpole_rn'}; did you mean {tmp_path / 'cartpole_run'}?"
    )
    result = _report(str(tmp_path / "unfinished"))
    assert result.returncode == 2 and result.stderr.startswith("sf: error: experiment_dir: ")
    assert "has no profile.json" in result.stderr and "runs in" in result.stderr and "cartpole_run" in result.stderr
    result = _report(str(tmp_path / "cartpole_run"), "--compare", str(tmp_path / "doom_basik"))
    assert result.stderr.strip().endswith(f"did you mean {tmp_path / 'doom_basic'}?")
    assert len(result.stderr.strip().splitlines()) == 1
