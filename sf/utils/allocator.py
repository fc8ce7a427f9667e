"""Keep memory freed by large tensors in the process heap instead of returning it to the OS.

glibc serves every allocation above its mmap threshold (at most 32 MiB) with a fresh `mmap` and unmaps it
on free, so a learner step at a Doom batch (activations of 30-120 MB each) paid about 100,000 page faults,
the kernel zeroing every page again: 1.53 s a step, 0.27 s of it in the kernel. With mmap off and heap
trimming pushed out of reach, freed blocks are reused: 1.21-1.28 s, no faults once warm (one thread, batch 1024,
convnet_simple + GRU 512). The price: a process keeps what it freed, bounded by a few of its largest blocks
(that learner settled at 1.2 GB instead of 0.8 GB after ten steps and stayed there).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger("sf")

_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_INT_MAX = 2**31 - 1  # mallopt takes a C int


def keep_freed_memory() -> bool:
    """Ask glibc to serve large blocks from the heap and never trim it; False where that is not possible."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):  # not glibc (macOS, musl without mallopt): nothing to do
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    ok = mallopt(_M_MMAP_MAX, 0) == 1 and mallopt(_M_TRIM_THRESHOLD, _INT_MAX) == 1
    if not ok:
        log.debug("mallopt refused the heap settings; large tensors keep their default allocation")
    return ok
