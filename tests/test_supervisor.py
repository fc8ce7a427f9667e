"""The supervisor's own guarantees, each on a small stand-in for a run: the stop flag and heartbeats survive any
death, a component that stops beating is named and ended, and when the main process dies its components stop by
themselves, the fork server goes at once and the guard ends what could not stop; a detached guard outlives its
process killed together with its children, as Ray kills a node agent."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
from conftest import ROOT, alive

from sf.supervision.guard import GRACE_S
from sf.supervision.shared_flags import Heartbeat, RunControl
from sf.supervision.supervisor import Supervisor


def _beat_until_stopped(control: RunControl, slot: int) -> None:
    while not control.is_set():
        control.beat(slot)
        time.sleep(0.01)


def test_the_stop_flag_and_heartbeats_are_shared_without_a_lock():
    ctx = mp.get_context("fork")
    control = RunControl(mp.get_context("spawn"), num_slots=2)
    child = ctx.Process(target=_beat_until_stopped, args=(control, 1))
    child.start()
    deadline = time.monotonic() + 30
    while control.beats()[1] < 3:
        assert time.monotonic() < deadline
    assert control.beats()[0] == 0
    os.kill(child.pid, signal.SIGKILL)  # a death at any instant leaves both readable: no lock to be left taken
    child.join()
    assert not control.wait(0.01)
    control.set()
    assert control.is_set() and control.wait(0)


def test_a_component_that_stops_beating_is_named_and_ended():
    supervisor = Supervisor(num_slots=1, heartbeat_timeout_s=1.0)
    supervisor.begin()
    proc = supervisor.start("Worker", mp.get_context("fork").Process(target=_beat_until_stopped,
                                                                      args=(supervisor.control, 0)), 0)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while supervisor.control.beats()[0] == 0:
            assert time.monotonic() < deadline
        os.kill(proc.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        failures = []
        while not failures:
            failures = supervisor.poll()
            assert time.monotonic() - stopped < 5
            time.sleep(0.05)
        took = time.monotonic() - stopped
        assert 1.0 <= took < 2.0, took
        assert [str(f) for f in failures] == [
            f"Worker (pid {proc.pid}) sent no heartbeat for 1 s (--heartbeat_timeout_sec): stopped or hung"
        ]
        assert not supervisor.running("Worker")  # nothing to wait for: ended at once
    finally:
        supervisor.control.set()
        supervisor.stop({"Worker"}, grace=0.0, crashed=True, exit_wait_s=1.0)


def _start_then_beat(control: RunControl, slot: int, start_s: float, start_limit_s: float) -> None:
    """A component whose start is one long call (an env, a JIT compile), then a loop that beats."""
    heartbeat = Heartbeat(control, slot, 0.05, start_limit_s)
    time.sleep(start_s)
    while not control.is_set():
        heartbeat.beat()
        time.sleep(0.05)


def test_a_long_start_is_not_a_hang_but_a_start_that_never_ends_is():
    supervisor = Supervisor(num_slots=2, heartbeat_timeout_s=0.5)
    supervisor.begin()
    ctx = mp.get_context("fork")
    slow = supervisor.start("Slow", ctx.Process(target=_start_then_beat, args=(supervisor.control, 0, 1.5, 3.0)), 0)
    stuck = supervisor.start("Stuck", ctx.Process(target=_start_then_beat, args=(supervisor.control, 1, 60, 1.0)), 1)
    try:
        failures = []
        while not failures:
            failures = supervisor.poll()
            time.sleep(0.05)
        took = time.monotonic() - supervisor.children["Stuck"].last_beat
        assert [f.label for f in failures] == ["Stuck"], [str(f) for f in failures]
        assert took >= 0.5 and supervisor.running("Slow") and not supervisor.running("Stuck")
        beats = supervisor.control.beats()[0]
        deadline = time.monotonic() + 10
        while supervisor.control.beats()[0] < beats + 3:  # the loop's own beats, once started
            assert time.monotonic() < deadline
        assert not supervisor.poll()
    finally:
        supervisor.control.set()
        supervisor.stop({"Slow", "Stuck"}, grace=0.0, crashed=True, exit_wait_s=1.0)
    assert not alive(slow.pid) and not alive(stuck.pid)


def test_when_the_main_process_dies_everything_of_its_run_ends_within_seconds(tmp_path):
    marker = tmp_path / "component_stopped"
    main = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "supervised_main.py"), str(marker)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        pids = json.loads(main.stdout.readline())
        os.kill(pids["sleeper"], signal.SIGSTOP)  # it cannot stop itself: the guard must end it
        main.kill()
        main.wait()
        died = time.monotonic()
        ended = {}
        while len(ended) < len(pids) and time.monotonic() - died < GRACE_S + 5:
            for name, pid in pids.items():
                if name not in ended and not alive(pid):
                    ended[name] = time.monotonic() - died
            time.sleep(0.02)
    finally:
        for pid in pids.values():
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert set(ended) == set(pids), ended
    assert ended["server"] < 1.0  # killed by the kernel with the main process
    assert ended["component"] < 2.0 and marker.read_text() == "stopped, main process gone: True"
    assert GRACE_S <= ended["sleeper"] < GRACE_S + 2.0 and ended["guard"] < GRACE_S + 2.0


OWNER = """
import sys, threading
from pathlib import Path
from sf.supervision.guard import Guard
from sf.supervision.shm_names import new_ledger
Path(sys.argv[1]).touch()
ledger = new_ledger()
guard = Guard(ledger, detached=True)
ledger.add([sys.argv[1]])
print(ledger.path.parent, flush=True)
threading.Event().wait()
"""


def test_a_detached_guard_removes_what_its_process_owned_when_that_process_dies_with_its_children():
    """As Ray ends a node agent: the process and every child of it killed at once. The detached guard is no child
    of it, so it survives to unlink the names it was handed."""
    owned = f"/dev/shm/sf_guard_test_foreign_{os.getpid()}"  # `foreign`: out of other tests' leak checks
    main = subprocess.Popen([sys.executable, "-c", OWNER, owned], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        private = Path(main.stdout.readline().strip())
        assert private.is_dir()
        children = psutil.Process(main.pid).children(recursive=True)
        assert not any("sf.supervision.guard" in " ".join(child.cmdline()) for child in children)
        for proc in [psutil.Process(main.pid), *children]:
            proc.kill()
        main.wait()
        died = time.monotonic()
        while (os.path.exists(owned) or private.exists()) and time.monotonic() - died < 5:
            time.sleep(0.02)
        assert not os.path.exists(owned) and not private.exists()
        assert time.monotonic() - died < 1.0
    finally:
        main.kill()
        Path(owned).unlink(missing_ok=True)


def test_the_guard_never_kills_a_pid_it_cannot_identify_by_its_start_time():
    """A pid handed over without a start time (its process ended before it could be read) may belong to another
    process by the time the guard acts: it is left alone, while an identified one is ended."""
    from sf.supervision.guard import end_left_behind
    from sf.supervision.orphans import start_time

    unknown = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    known = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        ended, _ = end_left_behind({unknown.pid: None, known.pid: start_time(known.pid)}, {}, time.time(), grace_s=0.2)
        assert known.wait(timeout=5) == -signal.SIGKILL
        assert unknown.poll() is None and len(ended) == 1
    finally:
        unknown.kill()
        known.kill()
        unknown.wait()
        known.wait()
