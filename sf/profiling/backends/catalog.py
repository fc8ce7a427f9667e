"""Every profiler sf can run, in one table: the name `--profiling_backend` takes, the class that runs it (imported
on first use, so an unused profiler's package is never loaded), and what the flag checks and the launcher need to
know about it."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

NONE = "none"


@dataclass(frozen=True)
class BackendInfo:
    name: str
    factory: str
    """`module:attribute` of the backend class (`sf.profiling.backends.base.Backend`)."""
    binary: str | None = None
    """The executable an external profiler needs on PATH (or beside this interpreter)."""
    command: str | None = None
    """`module:function` giving the command line of a profiler that starts the process (nsys, rocprof-sys) rather
    than running inside or beside it: `(section, output stem) -> (argv prefix, environment)`."""
    main_thread_only: bool = False
    """It follows the main thread only: env steps on other threads would vanish from its output."""


CATALOG: dict[str, BackendInfo] = {
    info.name: info
    for info in (
        BackendInfo("cprofile", "sf.profiling.backends.cprofile_backend:CProfileBackend", main_thread_only=True),
        BackendInfo("yappi", "sf.profiling.backends.yappi_backend:YappiBackend"),
        BackendInfo(
            "pyinstrument", "sf.profiling.backends.pyinstrument_backend:PyinstrumentBackend", main_thread_only=True
        ),
        BackendInfo("py_spy", "sf.profiling.backends.py_spy:PySpyBackend", binary="py-spy"),
        BackendInfo("torch", "sf.profiling.backends.torch_profiler:TorchBackend"),
        BackendInfo(
            "nsight",
            "sf.profiling.backends.external:CudaProfilerApiBackend",
            binary="nsys",
            command="sf.profiling.backends.external:nsight_command",
        ),
        BackendInfo(
            "rocprof_sys",
            "sf.profiling.backends.external:CudaProfilerApiBackend",
            binary="rocprof-sys-python",
            command="sf.profiling.backends.external:rocprof_sys_command",
        ),
    )
}

BACKEND_NAMES = (NONE, *CATALOG)
"""What `--profiling_backend` accepts."""
BINARIES = {name: info.binary for name, info in CATALOG.items() if info.binary}
WRAPPERS = tuple(name for name, info in CATALOG.items() if info.command)
MAIN_THREAD_PROFILERS = tuple(name for name, info in CATALOG.items() if info.main_thread_only)


def load(spec: str) -> Any:
    """`module:attribute` -> the object, importing the module now."""
    module, attr = spec.split(":")
    return getattr(importlib.import_module(module), attr)
