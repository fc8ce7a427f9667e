"""Run by test_supervisor as a run's main process would be: a supervisor starts two processes from the fork server, a
component that stops by itself when the main process dies (it writes `<marker>` then) and one that will be stopped
with SIGSTOP. Prints one JSON line of pids once the component runs (its first heartbeat), then waits to be killed."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

from sf.supervision import process_start
from sf.supervision.parent_link import ParentLink
from sf.supervision.supervisor import Supervisor


def component(control, marker: str) -> None:
    link = ParentLink(control).start()
    while not control.is_set():
        control.beat(0)
        time.sleep(0.01)
    Path(marker).write_text(f"stopped, main process gone: {link.gone}")


def sleeper() -> None:
    threading.Event().wait()


def main(marker: str) -> None:
    supervisor = Supervisor(num_slots=2)
    supervisor.begin()
    ctx = supervisor.context(["sf.supervision.parent_link"], single_thread=True)
    stopping = supervisor.start("component", ctx.Process(target=component, args=(supervisor.control, marker)), 0)
    stopped = supervisor.start("sleeper", ctx.Process(target=sleeper), 1)
    while supervisor.control.beats()[0] == 0:  # a component still starting has not started its link yet
        time.sleep(0.01)
    pids = dict(component=stopping.pid, sleeper=stopped.pid, server=next(iter(process_start.server_pids())))
    print(json.dumps({**pids, "guard": supervisor.guard.pid}), flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main(sys.argv[1])
