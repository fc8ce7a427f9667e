"""A process that imported torch spends 0.4-0.5 s at exit in the interpreter's last garbage collections, walking
torch's hundreds of thousands of objects to free memory the OS takes back anyway. Freezing the heap at exit (after
every atexit handler that registered before this one) leaves those objects to the OS; modules are still cleared and
files still flushed as usual."""

from __future__ import annotations

import atexit
import gc

_registered = False


def skip_final_collection() -> None:
    """From an entry point: at this process's exit, skip the collection of what is alive then. Idempotent."""
    global _registered
    if not _registered:
        atexit.register(gc.freeze)  # atexit runs handlers last-in first-out: this one runs among the last
        _registered = True
