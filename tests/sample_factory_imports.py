"""The import table of docs/customizing.md, read from the page, and a script's `sample_factory` imports rewritten by
it, name by name: what a user does to run a script written for Sample Factory under sf."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

PAGE = ROOT / "docs" / "customizing.md"
SCRIPTS = ROOT / "tests" / "sample_factory_scripts"
_STATEMENT = re.compile(r"`from ([\w.]+) import ([\w, ]+)`")
_SF_IMPORT = re.compile(r"^from (sample_factory[\w.]*) import (.+)$", re.M)


def import_table() -> dict[tuple[str, str], str]:
    """(Sample Factory module, name) -> the sf module that holds the name, for every row of the table."""
    table = {}
    for line in PAGE.read_text().splitlines():
        if not line.startswith("| `from sample_factory"):
            continue
        left, right = line.strip("|").split(" | ")[:2]
        targets = {name.strip(): module for module, names in _STATEMENT.findall(right) for name in names.split(",")}
        for module, names in _STATEMENT.findall(left):
            for name in (n.strip() for n in names.split(",")):
                table[(module, name)] = targets[name]
    return table


def rewrite(source: str, table: dict[tuple[str, str], str]) -> str:
    """`source` with each `from sample_factory... import a, b` line replaced by the sf imports of the table."""

    def replace(match: re.Match) -> str:
        by_target: dict[str, list[str]] = {}
        for name in (n.strip() for n in match.group(2).split(",")):
            key = (match.group(1), name)
            if key not in table:
                raise KeyError(f"docs/customizing.md has no row for {name} of {match.group(1)}")
            by_target.setdefault(table[key], []).append(name)
        return "\n".join(f"from {module} import {', '.join(names)}" for module, names in by_target.items())

    return _SF_IMPORT.sub(replace, source)


def write_rewritten_scripts(folder: Path) -> Path:
    """Every script of tests/sample_factory_scripts, rewritten, in `folder`."""
    table = import_table()
    for script in SCRIPTS.glob("*.py"):
        (folder / script.name).write_text(rewrite(script.read_text(), table))
    return folder


def run_script(script: Path, args: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    """A rewritten script run as a program (`python <script>`, so what it defines lives in `__main__`)."""
    return subprocess.run(
        [sys.executable, str(script), *args],
        cwd=cwd,
        env=dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
