"""How a parallel run starts its component processes: forked from a server that has imported torch and sf once.

A spawned process is a fresh interpreter that imports torch, numpy and sf again: 1-2 s of CPU each, six processes
in the Doom suite, paid on the same cores the run then needs (3.5 s from start to the first component ready on 2
cores). Python's fork server imports `preload` once and forks each component from itself: a clean process, started
like a spawned one (arguments pickled, nothing inherited from the runner's own state), that shares the imported
modules' memory copy-on-write. A process an external profiler must wrap (nsys, py-spy, ...) is still spawned, through
the profiler's wrapper script (`sf.profiling.launch`).

The server's environment is what its children inherit, not the runner's at each start: it is started with the math
libraries' thread variables set to 1 when `--force_envs_single_thread` asks for that (every component process sets
torch to one thread anyway), and with SIGINT and SIGTERM blocked, as the runner blocks them for its components.
"""
from __future__ import annotations

import multiprocessing as mp
import multiprocessing.forkserver
from multiprocessing.context import BaseContext

from sf.utils.process_settings import thread_limits

BASE_PRELOAD = ("torch", "numpy", "faster_fifo", "sf.runtime.runner_parallel")


def forkserver_available() -> bool:
    return "forkserver" in mp.get_all_start_methods()


def preload_modules(env_factories: dict) -> list[str]:
    """What the server imports: torch, sf's component code and the modules that registered the run's envs."""
    env_modules = {factory.__module__ for factory in env_factories.values()}
    return [*BASE_PRELOAD, *sorted(m for m in env_modules if m and m != "__main__")]


def component_context(preload: list[str], single_thread: bool) -> BaseContext:
    """The context to start component processes from: the fork server, running, or spawn where there is none.
    Call with SIGINT and SIGTERM blocked: the server keeps the mask it starts with and hands it to its children."""
    if not forkserver_available():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(preload)
    with thread_limits(single_thread):
        multiprocessing.forkserver.ensure_running()
    return ctx


def stop_server() -> None:
    """End the fork server once every component it started is gone, so a later run in this process starts its own
    (with that run's preload) and nothing of this run outlives it."""
    server = getattr(multiprocessing.forkserver, "_forkserver", None)
    stop = getattr(server, "_stop", None)
    if stop is not None:
        stop()
