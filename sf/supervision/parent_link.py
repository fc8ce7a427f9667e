"""How a process of the run learns that the run's main process is gone, whoever forked it.

Under the fork server a component's parent is the server, not the main process, so `os.getppid()` says nothing about
the main process. What does: the pipe multiprocessing keeps open in the process that asked for a child, one per
child, whose other end the child holds as `multiprocessing.parent_process().sentinel`. It reads end of file exactly
when the main process is gone (however it ended), and waiting for that costs a thread blocked in the kernel.
`ParentLink` is that thread: it sets the run's stop flag, so the component's loop stops, closes its envs and exits.

The fork server itself is linked with PR_SET_PDEATHSIG: `arm_server()` runs in it as it imports its preload modules
and has the kernel kill it when the main process dies (its children are linked as above; it has nothing to save).
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading

log = logging.getLogger("sf")

MAIN_PID_VARIABLE = "SF_MAIN_PID"  # set while the main process starts the fork server: the pid the server watches
_PR_SET_PDEATHSIG = 1


class ParentLink:
    """A daemon thread that sets `control`'s stop flag when the main process is gone; `gone` tells the component
    not to wait for a runner that no longer reads its messages."""

    def __init__(self, control):
        self.control = control
        self.gone = False
        parent = multiprocessing.parent_process()
        self.parent_pid = parent.pid if parent is not None else None
        self._sentinel = parent.sentinel if parent is not None else None

    def start(self) -> ParentLink:
        if self._sentinel is not None:
            threading.Thread(target=self._watch, name="sf-parent-link", daemon=True).start()
        return self

    def _watch(self) -> None:
        multiprocessing.connection.wait([self._sentinel])
        self.gone = True
        log.warning("the main process (pid %s) is gone: stopping", self.parent_pid)
        self.control.set()


def arm_server() -> None:
    """In the fork server (the main process's pid in MAIN_PID_VARIABLE): die with the main process."""
    expected = os.environ.get(MAIN_PID_VARIABLE)
    if expected is None or int(expected) != os.getppid():
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != int(expected):  # the main process died before the link was armed
        os._exit(0)
