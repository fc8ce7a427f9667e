"""A process killed in the middle of a queue operation: nothing half-written is ever read, and the main process,
which never waits on a queue without a deadline, still names the death within a second."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT
from queue_layout import layout_recognised

from sf.supervision.orphans import session_members

TRIALS = 30


def test_a_writer_killed_inside_a_large_put_never_hands_over_half_a_message():
    assert layout_recognised()  # else the count of kills inside a put below would mean nothing
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "torn_writes.py"), str(TRIALS), "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    stats = json.loads(out.strip().splitlines()[-1])
    assert stats["not_whole"] == 0 and stats["read"] >= TRIALS  # each trial reads its first message whole, then more
    assert stats["killed_inside_put"] >= 3  # deaths that left a size header without its payload behind the lock
    assert stats["longest_wait_s"] < 0.5  # every get of the main thread returned on time, dead writer or not
    assert stats["slowest_death_s"] < 1.0
    assert not session_members(proc.pid)  # every writer and the guard are gone
