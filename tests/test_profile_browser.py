"""The report pages in a real browser: headless Chromium (Debian's `chromium`) opens `profiling/report.html` of a real
run and `compare.html` of two, the test fails on any console message (the pages log nothing, so every message is an
error), checks that a click sorts a table, and saves screenshots next to the pages.

Chromium is installed with apt-get where it is missing and the test runs as root; elsewhere the tests skip, saying
why. The network is closed to it: no background services, a fresh profile each time."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from sf.analysis.cli import run_compare, run_report
from tests.test_profile_compare import slowed_copy

pytestmark = pytest.mark.slow

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--hide-scrollbars",
    "--enable-logging=stderr",
    "--v=0",
]
CONSOLE = re.compile(r":CONSOLE[:(]\d+\)?\] (.*)")


@pytest.fixture(scope="module")
def chromium() -> str:
    found = shutil.which("chromium")
    if found is None and os.geteuid() == 0 and shutil.which("apt-get"):
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True, timeout=600)
        subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], env=env, capture_output=True, timeout=1200)
        found = shutil.which("chromium")
    if found is None:
        pytest.skip("no chromium on PATH, and it cannot be installed here (apt-get as root is needed)")
    return found


def open_page(chromium: str, page: Path, screenshot: Path, tmp_path: Path, size: str = "1366,2400") -> list[str]:
    """Load the page, save a screenshot, return the console messages it produced."""
    profile = tmp_path / f"profile_{screenshot.stem}"
    done = subprocess.run(
        [
            chromium,
            *FLAGS,
            f"--user-data-dir={profile}",
            f"--window-size={size}",
            "--virtual-time-budget=3000",
            f"--screenshot={screenshot}",
            page.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert screenshot.exists() and screenshot.stat().st_size > 2_000, done.stderr[-3000:]
    return [m.group(1) for m in map(CONSOLE.search, done.stderr.splitlines()) if m]


def test_the_console_check_sees_an_error(chromium, tmp_path):
    """The check this file relies on: a page with a script error produces a console message."""
    bad = tmp_path / "bad.html"
    bad.write_text("<!doctype html><p>" + "x " * 5000 + "</p><script>notDefined();</script>")
    messages = open_page(chromium, bad, tmp_path / "bad.png", tmp_path, "800,600")
    assert any("notDefined is not defined" in m for m in messages), messages


def test_report_page_loads_without_errors_and_sorts(chromium, sleepy_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(sleepy_run, run)
    run_report(run)
    page = run / "profiling" / "report.html"
    messages = open_page(chromium, page, run / "profiling" / "report.png", tmp_path)
    assert messages == []
    # a click on the "work" header of the components table sorts its rows, busiest first on the second click
    probe = run / "profiling" / "sort_probe.html"
    probe.write_text(
        page.read_text().replace(
            "</body>",
            "<script>var th = document.querySelectorAll('table.sortable')[1].tHead.rows[0].cells[2];"
            "th.click(); th.click();"
            "var body = document.querySelectorAll('table.sortable')[1].tBodies[0];"
            "console.log('first: ' + body.rows[0].cells[0].textContent + ' of ' + body.rows.length);</script></body>",
        )
    )
    logged = open_page(chromium, probe, tmp_path / "probe.png", tmp_path, "800,600")
    assert len(logged) == 1 and logged[0].startswith('"first: RolloutWorker_w'), logged


def test_compare_page_loads_without_errors(chromium, sleepy_run, tmp_path):
    slow = slowed_copy(sleepy_run, tmp_path / "slow", 1.2)
    run_compare(sleepy_run, slow)
    page = slow / "profiling" / "compare.html"
    assert open_page(chromium, page, slow / "profiling" / "compare.png", tmp_path) == []
