"""Collect `bench_*.py` as test modules, so `pytest benchmarks --benchmark-only` finds every benchmark
without widening `python_files` for the test suite."""

from __future__ import annotations

from fnmatch import fnmatch
from pathlib import Path

import pytest


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Module | None:
    if not (file_path.name.startswith("bench_") and file_path.suffix == ".py"):
        return None
    already_collected = parent.session.isinitpath(file_path) or any(
        fnmatch(file_path.name, pattern) for pattern in parent.config.getini("python_files")
    )
    return None if already_collected else pytest.Module.from_parent(parent, path=file_path)
