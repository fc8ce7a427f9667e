"""Where the profiling section meets the processes: which processes a selection covers, the command an external
profiler starts a process with, and the per-process hook that opens capture windows on the component loop.

The runners call three things: `launched_under_profiler` around starting a component process, `attach` once the
process's loop exists (then `begin()` before the loop runs and `end()` after it, whatever stopped it), and
`join_wait_s` for how long to let processes finish writing.
"""

from __future__ import annotations

import logging
import multiprocessing.spawn
import os
import shlex
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from sf.profiling.backends import get_backend
from sf.profiling.backends.catalog import CATALOG, load
from sf.profiling.config import ProfilingConfig
from sf.profiling.window import StepGate
from sf.utils.roles import WORKER_GROUPS, Role, role_of

log = logging.getLogger("sf")

# the component groups living in each kind of process
KIND_GROUPS: dict[str, tuple[Role, ...]] = {
    "rollout": (Role.ROLLOUT_WORKER,),
    "inference": (Role.INFERENCE_WORKER,),
    "learner": (Role.LEARNER, Role.BATCHER),
    "rollout_inference": (Role.ROLLOUT_WORKER, Role.INFERENCE_WORKER),  # --inference_placement=rollout_worker
    "runner": (Role.RUNNER,),
    "serial": WORKER_GROUPS,
}
JOIN_WAIT_S = 60.0  # profilers write their files as their process ends


def selected(pcfg: ProfilingConfig, kind: str) -> bool:
    return any(pcfg.selects(group) for group in KIND_GROUPS[kind])


def output_name(pcfg: ProfilingConfig, kind: str, label: str) -> str:
    """Outputs are named after the process's component: `Learner_0`, `RolloutWorker_w1`, `InferenceWorker_p0-w0`;
    a learner process profiled for its batcher only is `Batcher_0`; the one process of serial mode is `serial`."""
    if kind == "serial":
        return "serial"
    if kind == "learner" and not pcfg.selects(Role.LEARNER):
        label = label.replace(Role.LEARNER.value, Role.BATCHER.value)
    return label.replace(" ", "_")


def join_wait_s(pcfg: ProfilingConfig, default: float) -> float:
    return max(default, JOIN_WAIT_S) if pcfg.enabled else default


def wrapper_script(pcfg: ProfilingConfig, name: str, python: str) -> Path:
    """`<output_dir>/<name>.launch.sh`: the exact command the process starts under, kept next to its output."""
    prefix, env = load(CATALOG[pcfg.backend].command)(pcfg, pcfg.output_dir / name)
    lines = ["#!/bin/sh", f"# {name}: started by sf under --profiling_backend={pcfg.backend}"]
    lines += [f"export {key}={shlex.quote(value)}" for key, value in env.items()]
    lines.append("exec " + " ".join(shlex.quote(token) for token in [*prefix, python]) + ' "$@"')
    path = pcfg.output_dir / f"{name}.launch.sh"
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o755)
    return path


def wraps(pcfg: ProfilingConfig, kind: str) -> bool:
    """An external profiler starts processes of this kind (which must then be spawned, through its wrapper)."""
    return pcfg.wraps_processes and selected(pcfg, kind)


@contextmanager
def launched_under_profiler(ctx, pcfg: ProfilingConfig, kind: str, label: str) -> Iterator[None]:
    """Processes started inside this block run under the external profiler if their group is selected.

    Spawned processes are started as `<python> -c ... --multiprocessing-fork`; the wrapper script takes the
    interpreter's place for this one start, then the plain interpreter is restored.
    """
    if not wraps(pcfg, kind):
        yield
        return
    pcfg.output_dir.mkdir(parents=True, exist_ok=True)
    python = multiprocessing.spawn.get_executable()
    script = wrapper_script(pcfg, output_name(pcfg, kind, label), os.fsdecode(python))
    log.info("%s starts under %s", label, script.read_text().splitlines()[-1].removeprefix("exec "))
    ctx.set_executable(str(script))
    try:
        yield
    finally:
        ctx.set_executable(python)


class ProcessProfile:
    """The profiler of one process: a capture gate driven by the learner iterations this process can see."""

    def __init__(self, gate: StepGate, current_step: Callable[[], int]):
        self.gate = gate
        self.current_step = current_step

    def begin(self) -> None:
        self.gate.begin(self.current_step())

    def poll(self) -> None:
        self.gate.at_step(self.current_step())

    def end(self) -> None:
        self.gate.end()


def attach(pcfg: ProfilingConfig, kind: str, label: str, loop, policy_store=None) -> ProcessProfile | None:
    """Hook the profiler into a process's loop, or None when the selection does not cover this process.

    With a learner on the loop, its handler of `learner.iteration_kind` (a training batch) marks the iteration
    boundaries exactly; elsewhere the version published in `policy_store` is read once per loop pass (only when
    --profiling_steps is set).
    """
    if not selected(pcfg, kind):
        return None
    gate = StepGate(pcfg, output_name(pcfg, kind, label), get_backend(pcfg.backend))
    learner = next((c for name, c in loop.components.items() if role_of(name) == Role.LEARNER), None)
    if learner is not None:
        profile = ProcessProfile(gate, lambda: learner.version + 1)
        if pcfg.steps:
            train = learner.handlers[learner.iteration_kind]

            def gated_train(msg) -> None:
                profile.poll()
                train(msg)
                profile.poll()

            learner.handlers[learner.iteration_kind] = gated_train
        return profile
    profile = ProcessProfile(gate, _version_reader(policy_store))
    if pcfg.steps:
        loop.every(0.0, profile.poll)
    return profile


def _version_reader(store) -> Callable[[], int]:
    """The store's published version + 1; a shared store is read through a numpy view of its shared counter."""
    if store is None:
        return lambda: 1
    shared = getattr(store, "version_t", None)
    if shared is None:
        return lambda: store.version + 1
    counter = shared.numpy()
    return lambda: int(counter[0]) + 1
