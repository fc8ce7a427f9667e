"""OS-level settings of one component process: math-library threads, the allocator, priority, CPU pinning.

Component processes are started with `spawn`, so a child's math libraries read their thread variables when
the child imports them, before any of our code runs there: those variables are set in the parent around
`Process.start()` (`thread_limits`). Everything else is applied by the child itself (`apply_process_settings`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager

from sf.utils.allocator import keep_freed_memory

log = logging.getLogger("sf")

# --learner_priority: how many nice levels collection (rollout and inference processes, and the env engines they
# start) sits below the learner, the one stage of the pipeline that cannot be spread over more processes
COLLECTOR_NICE_OFFSET = 5

THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMBA_NUM_THREADS",
)


@contextmanager
def thread_limits(enabled: bool) -> Iterator[None]:
    """While active, children started from this process load their math libraries with one thread each."""
    saved = {name: os.environ.get(name) for name in THREAD_VARIABLES}
    if enabled:
        os.environ.update({name: "1" for name in THREAD_VARIABLES})
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def worker_core(index: int) -> int:
    """The core rollout worker `index` is pinned to: round robin over the cores this process may use."""
    cores = sorted(os.sched_getaffinity(0))
    return cores[index % len(cores)]


def learner_threads(cfg) -> int:
    """Torch threads of a parallel run's learner process. In synchronous training (`--async_rl=False`) collection
    waits for the weights the learner is computing, so the learner may use every core this process may run on; with
    collection running beside it, one (a second thread competed with inference and the envs at every operator)."""
    if cfg.async_rl or not hasattr(os, "sched_getaffinity"):
        return 1
    return len(os.sched_getaffinity(0))


def apply_process_settings(cfg, kind: str, index: int) -> None:
    """Settings one component process applies to itself before it builds anything.

    kind: "rollout", "inference" or "learner" for a component process of a parallel run, "serial" for the single
    process of a serial run (which takes no priority or pinning: it is the user's own process).
    """
    import torch  # here: `thread_limits` is used before torch is imported, to start the fork server beside it

    torch.set_num_threads(learner_threads(cfg) if kind == "learner" else 1)
    if cfg.keep_freed_memory:
        keep_freed_memory()
    if kind == "serial":
        return
    if cfg.default_niceness:  # 0 leaves the priority the run was launched with
        try:
            os.setpriority(os.PRIO_PROCESS, 0, cfg.default_niceness)
        except PermissionError:
            log.warning(
                "--default_niceness=%d needs privileges this user lacks; priority unchanged", cfg.default_niceness
            )
    if cfg.learner_priority and kind in ("rollout", "inference"):
        os.nice(COLLECTOR_NICE_OFFSET)  # relative to the above, and upwards: needs no privilege
    if kind == "rollout" and cfg.set_workers_cpu_affinity and hasattr(os, "sched_setaffinity"):
        # a worker stepping its envs on several threads gets as many cores, the next ones round robin
        threads = cfg.env_threads
        os.sched_setaffinity(0, {worker_core(index * threads + k) for k in range(threads)})
