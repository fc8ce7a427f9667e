"""The experiment folder a profile tool was given, checked before it reads anything: a folder that is not a finished
run is one `sf: error:` line naming the closest runs beside it (`train_dir/cartpole_rn`: did you mean
train_dir/cartpole_run?)."""

from __future__ import annotations

import difflib
from pathlib import Path

RUN_FILE = "profile.json"  # what a finished run leaves in its folder


def folder_error(flag: str, folder: str | Path, must_exist: bool = True) -> str | None:
    """The error line for `folder` given as `flag`, or None when it holds a finished run (or, with
    `must_exist=False`, when it is at least a folder or may become one)."""
    path = Path(folder)
    if (path / RUN_FILE).exists() or (not must_exist and (path.is_dir() or not path.parent.is_dir())):
        return None
    if path.is_dir():
        what = f"{path} has no {RUN_FILE} (a run that has not finished, or not an experiment folder)"
    else:
        what = f"no folder {path}"
    runs = _runs_beside(path)
    close = difflib.get_close_matches(path.name, list(runs), n=3, cutoff=0.5)
    if close:
        hint = "; did you mean " + " or ".join(str(runs[name]) for name in close) + "?"
    elif runs:
        hint = f"; runs in {path.parent}: " + ", ".join(sorted(runs)[:8]) + (", ..." if len(runs) > 8 else "")
    else:
        hint = "; give the folder of a finished run (<train_dir>/<experiment>)"
    return f"sf: error: {flag}: {what}{hint}"


def _runs_beside(path: Path) -> dict[str, Path]:
    """The finished runs in `path`'s parent folder, by name."""
    parent = path.parent
    if not parent.is_dir():
        return {}
    return {p.name: p for p in parent.iterdir() if p.is_dir() and (p / RUN_FILE).exists() and p != path}
