"""How a parallel run starts its component processes: forked from a server that has imported torch and sf once.

A spawned process is a fresh interpreter that imports torch, numpy and sf again: 1-2 s of CPU each, six processes
in the Doom suite, paid on the same cores the run then needs (3.5 s from start to the first component ready on 2
cores). Python's fork server imports `preload` once and forks each component from itself: a clean process, started
like a spawned one (arguments pickled, nothing inherited from the runner's own state), that shares the imported
modules' memory copy-on-write. A process an external profiler must wrap (nsys, py-spy, ...) is still spawned, through
the profiler's wrapper script (`sf.profiling.launch`).

The server's environment is what its children inherit, not the runner's at each start: it is started with the math
libraries' thread variables set to 1 when `--force_envs_single_thread` asks for that (every component process sets
torch to one thread anyway), and with SIGINT and SIGTERM blocked, as the runner blocks them for its components. It
dies with the process that started it (`sf.supervision.fork_server_link`). `run_rl` starts it before anything else
(`start_server`); the supervisor (`sf.supervision.supervisor`) starts every component from it.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.context import BaseContext

from sf.envs.registry import RegistrySnapshot
from sf.supervision.parent_link import MAIN_PID_VARIABLE
from sf.utils.process_settings import thread_limits

log = logging.getLogger("sf")

STOP_TIMEOUT_S = 5.0
STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}  # blocked in the server and so in every component it forks
BASE_PRELOAD = ("torch", "numpy", "faster_fifo", "sf.runner.parallel", "sf.supervision.kernel_warmup")
SERVER_LINK = "sf.supervision.fork_server_link"


def forkserver_available() -> bool:
    return "forkserver" in mp.get_all_start_methods()


def preload_modules(registry: RegistrySnapshot, main_module: str | None = None) -> list[str]:
    """What the server imports: torch, sf's component code and the modules that registered the run's envs, but not
    the module this process runs as `__main__` (`python -m <main_module>`, whose family imported it again under its
    own name): each child runs it as `__mp_main__` first, and finding it imported already, runpy would warn."""
    main_module = main_module or _main_module()
    factories = [*registry.envs.values(), *registry.vector_envs.values()]
    env_modules = {factory.__module__ for factory in factories}
    return [*BASE_PRELOAD, *sorted(m for m in env_modules if m and m not in ("__main__", main_module))]


def _main_module() -> str | None:
    """The module name `python -m` ran as `__main__`; None for a script or an interactive session."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return getattr(spec, "name", None)


def component_context(preload: list[str], single_thread: bool) -> BaseContext:
    """The context to start component processes from: the fork server, running, or spawn where there is none. The
    server is started with SIGINT and SIGTERM blocked, a mask it hands to every child it forks.

    Started from the main thread, the server dies with this process (`sf.supervision.fork_server_link`, imported first,
    so that a server this process no longer needs does not finish its imports)."""
    if not forkserver_available():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    linked = threading.current_thread() is threading.main_thread()
    ctx.set_forkserver_preload([SERVER_LINK, *preload] if linked else preload)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        multiprocessing.resource_tracker.ensure_running()  # starting the tracker unblocks SIGINT and SIGTERM again
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        with thread_limits(single_thread), _main_pid_variable(linked):
            multiprocessing.forkserver.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    return ctx


def start_server(registry: RegistrySnapshot, single_thread: bool) -> None:
    """Start the fork server before this process imports torch and probes the env: the server's own imports (torch,
    sf, the env modules; 2-3 s of one core) then run beside this process's set-up instead of after it, and the
    components start as soon as the runner asks (`component_context` finds the server running)."""
    component_context(preload_modules(registry), single_thread)


@contextmanager
def _main_pid_variable(enabled: bool) -> Iterator[None]:
    """While active, a server started from here knows which process it must die with; nothing started later does."""
    if enabled:
        os.environ[MAIN_PID_VARIABLE] = str(os.getpid())
    try:
        yield
    finally:
        os.environ.pop(MAIN_PID_VARIABLE, None)


def _server():
    return getattr(multiprocessing.forkserver, "_forkserver", None)


def server_pids() -> set[int]:
    """The fork server's pid while it runs (for cleanups of left-behind processes to spare)."""
    pid = getattr(_server(), "_forkserver_pid", None)
    return {pid} if pid is not None else set()


def discard_server() -> None:
    """End a server that started no component (the run ended before it started them), at once: a stop would wait for
    the server to finish importing torch."""
    for pid in server_pids():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    stop_server()


def stop_server(timeout_s: float = STOP_TIMEOUT_S) -> None:
    """End the fork server once every component it started and every process they started are gone, so a later run
    in this process starts its own (with that run's preload) and nothing of this run outlives it.

    The server leaves when no process holds its "alive" pipe any more, and every child it forks holds that pipe,
    as does whatever a child starts without closing its descriptors (a VizDoom engine). A process that should be
    gone and is not would keep it waiting: after `timeout_s` it is killed."""
    server, pids = _server(), server_pids()
    stop = getattr(server, "_stop", None)
    if stop is None or not pids:
        return
    stopper = threading.Thread(target=stop, name="sf-forkserver-stop", daemon=True)
    stopper.start()
    stopper.join(timeout_s)
    if stopper.is_alive():
        log.warning("the fork server did not stop within %.0f s: killing it", timeout_s)
        os.kill(pids.pop(), signal.SIGKILL)
        stopper.join()
