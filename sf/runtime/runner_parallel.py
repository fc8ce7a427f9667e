"""Parallel placement: each rollout worker, each inference worker and each learner (with its batcher) in
its own process; the runner stays in this one. With `--inference_placement=rollout_worker` (the default for
small models on the CPU) there are no inference processes: each rollout worker's process also holds an inference
worker of each policy, serving that worker alone through the local deque.

Processes are forked from a server that has imported torch and sf once (`sf.runtime.process_start`), or spawned
where an external profiler wraps them, through `start_component_process`, one call per process.
Every process watches the shared stop event and its parent; the runner watches every process, so a
crash anywhere ends the run within seconds, with the profiles that could be collected.

Stopping: the main process alone reacts to SIGINT and SIGTERM (component processes leave both to it), sets
the stop event, and gives the components `--stop_timeout_sec` to finish the message at hand (a learner its
training iteration), save and send their final trees; after a crash the survivors get `CRASH_GRACE_S`,
since one may be stuck on a queue the dead process held. A process still running then is killed, with a
warning, and processes left behind by killed components (env engines) are ended too. A queue lock a killed process
held is released by the runner's `LockWatch` (`sf.runtime.abandoned_locks`), so neither the runner's own inbox nor
the survivors' stay blocked on it.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import signal
import time
import traceback
from functools import partial

import faster_fifo
import faster_fifo_reduction  # noqa: F401  (lets queues travel to spawned processes)
import torch
import torch.multiprocessing  # noqa: F401  (shares tensors with spawned processes by file descriptor)

from sf.envs.registry import registry_snapshot, restore_registry
from sf.profiling import launch as profiling
from sf.profiling import resources, timeline
from sf.runtime import process_start
from sf.runtime.abandoned_locks import LockWatch
from sf.runtime.event_loop import EventLoop, StopLoop
from sf.runtime.experiment import Experiment
from sf.runtime.names import (
    RUNNER,
    batcher_name,
    inference_worker_name,
    learner_name,
    policy_queue_name,
    rollout_worker_name,
)
from sf.runtime.orphans import adopt_orphans, child_pids, end_orphans
from sf.runtime.policy_store import SharedPolicyStore
from sf.runtime.runner import Runner
from sf.runtime.setup import EnvInfo, build_buffers, build_model, resolve_inference_placement
from sf.utils.process_settings import apply_process_settings, thread_limits

log = logging.getLogger("sf")

QUEUE_BYTES = 4 * 1024 * 1024
CRASH_GRACE_S = 3.0  # after a component died: the run must end within seconds, whatever the others do
EXIT_WAIT_S = 2.0  # a process that has sent its final trees only has to exit
PARENT_CHECK_S = 1.0
WATCH_S = 0.1  # how often the runner looks for a dead component: a few waitpid calls
STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


def run_parallel(cfg, experiment: Experiment, env_info: EnvInfo, device: str, stop_event_local, cluster=None) -> dict:
    """`cluster` (sf.distributed.backend.RayPlacement) keeps some rollout workers here and runs the others on
    other nodes, under links that the runner watches and stops like its own processes."""
    ctx = mp.get_context("spawn")
    stop_event = ctx.Event()
    model = build_model(cfg, env_info, "cpu")
    cfg.inference_placement = resolve_inference_placement(cfg, device, model)
    experiment.write_config()  # with what auto chose
    colocated = cfg.inference_placement == "rollout_worker"
    log.info(
        "policy inference %s",
        "in each rollout worker's process"
        if colocated
        else f"in {cfg.policy_workers_per_policy} process(es) per policy",
    )
    buffers = build_buffers(cfg, env_info, model.rnn_state_size, shared=True)
    stores = [
        SharedPolicyStore(build_model(cfg, env_info, "cpu", seed_offset=p), ctx.Lock(), stop_event)
        for p in range(cfg.num_policies)
    ]
    del model

    queues = {RUNNER: faster_fifo.Queue(QUEUE_BYTES)}
    for p in range(cfg.num_policies):
        if not colocated:
            queues[policy_queue_name(p)] = faster_fifo.Queue(QUEUE_BYTES)
        queues[learner_name(p)] = faster_fifo.Queue(QUEUE_BYTES)
    local_workers = tuple(range(cfg.num_workers)) if cluster is None else cluster.local_workers
    for w in local_workers:
        queues[rollout_worker_name(w)] = faster_fifo.Queue(QUEUE_BYTES)
    if cluster is not None:
        queues.update(cluster.routes())

    specs = [("learner", p, None) for p in range(cfg.num_policies)]
    if local_workers and not colocated:
        specs += [("inference", p, i) for p in range(cfg.num_policies) for i in range(cfg.policy_workers_per_policy)]
    specs += [("rollout", w, None) for w in local_workers]
    shared = dict(
        cfg=cfg,
        env_info=env_info,
        buffers=buffers,
        stores=stores,
        queues=queues,
        stop_event=stop_event,
        device=device,
        experiment_dir=str(experiment.dir),
        envs=registry_snapshot(),
    )

    runner = Runner(cfg, experiment, on_stop_request=stop_event.set)
    expected = {_process_label(kind, a, b) for kind, a, b in specs} | {batcher_name(p) for p in range(cfg.num_policies)}
    if colocated:
        expected |= {inference_worker_name(p, w) for p in range(cfg.num_policies) for w in local_workers}
    if cluster is not None:
        runner.nodes.update({name: cluster.driver.to_dict() for name in expected | {RUNNER}})
        expected |= cluster.component_names()
    loop = EventLoop(inbox=queues[RUNNER], routes=_routes(cfg, queues), stop_event=stop_event)
    loop.add(runner)
    if cfg.profiling_timeline:
        runner.timeline = timeline.Recorder()
        loop.enable_timeline(runner.timeline)
    processes: dict[str, mp.Process] = {}

    def watch_processes() -> None:
        if stop_event_local.is_set():
            runner.request_stop("interrupted")
        for name, proc in processes.items():
            if proc.exitcode is not None:
                runner.request_stop("error", f"{name} exited with code {proc.exitcode}")

    loop.every(WATCH_S, watch_processes, owner=runner)
    profile = profiling.attach(cfg.profiling, "runner", RUNNER, loop, stores[0])
    adopted = adopt_orphans()
    keep = child_pids()  # the resource tracker: everything started from here on must be gone at the end
    lock_watch = LockWatch(queues).start()  # a component killed inside a queue operation must not stop this loop
    with runner.timing.add_time("main_loop"):
        try:
            if profile is not None:
                profile.begin()
            if cluster is not None:  # first: other nodes start their agents while this one starts its processes
                processes.update(
                    cluster.start_links(shared, str(experiment.dir), runner.nodes, partial(_grace, cfg, runner))
                )
            # Components are born with SIGINT and SIGTERM blocked (all their threads, and the processes they start,
            # such as VizDoom engines, inherit the mask): only this process reacts, by stopping the run in order,
            # so a signal to the whole process group cannot end an engine or a learner half-way.
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
            with runner.timing.add_time("start_processes"):
                start_ctx = process_start.component_context(
                    process_start.preload_modules(shared["envs"]), cfg.force_envs_single_thread
                )
                for kind, a, b in specs:
                    label = _process_label(kind, a, b)
                    processes[label] = start_component_process(start_ctx, kind, a, b, shared)
                    log.info("started %s pid=%d", label, processes[label].pid)
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            loop.run()
        except Exception:
            runner.stop_status, runner.error = "error", traceback.format_exc().strip().splitlines()[-1]
            log.error("runner failed:\n%s", traceback.format_exc())
        finally:
            stop_event.set()
            loop.measure()
            with runner.timing.add_time("wait_shutdown"):
                crashed = runner.stop_status == "error"
                grace = _grace(cfg, runner)
                log.info(
                    "stopping (%s%s): waiting up to %.0f s for every component to finish and save",
                    runner.stop_status or "interrupted",
                    f": {runner.error}" if runner.error else "",
                    grace,
                )
                reported = _collect_profiles(runner, queues[RUNNER], processes, expected, time.monotonic() + grace)
                if profile is not None:
                    profile.end()
                _end_processes(processes, reported, grace, crashed, profiling.join_wait_s(cfg.profiling, EXIT_WAIT_S))
                end_orphans(keep | process_start.server_pids())  # a killed worker's engines hold the server
                process_start.stop_server()
                lock_watch.stop()
            if adopted:
                adopt_orphans(False)
    if runner.stop_status is None:
        runner.stop_status = "interrupted"
    return runner.finish()


def _grace(cfg, runner: Runner) -> float:
    """Seconds the components get to stop: --stop_timeout_sec, or CRASH_GRACE_S after a failure."""
    return min(CRASH_GRACE_S, cfg.stop_timeout_sec) if runner.stop_status == "error" else cfg.stop_timeout_sec


def _process_label(kind: str, a: int, b: int | None) -> str:
    return {"learner": learner_name(a), "rollout": rollout_worker_name(a)}.get(kind) or inference_worker_name(a, b)


def _profiled_kind(cfg, kind: str) -> str:
    """The kind of process as profiling selects it: a rollout worker's process may also hold inference workers."""
    return "rollout_inference" if kind == "rollout" and cfg.inference_placement == "rollout_worker" else kind


def _routes(cfg, queues: dict) -> dict:
    routes = {name: q for name, q in queues.items()}
    for p in range(cfg.num_policies):
        routes[batcher_name(p)] = queues[learner_name(p)]
    return routes


def start_component_process(ctx, kind: str, a: int, b: int | None, shared: dict) -> mp.Process:
    """Start one component process. The single place to change how a kind of process is launched: from `ctx`, or
    spawned under the profiler's wrapper script when an external profiler covers it."""
    label = _process_label(kind, a, b)
    cfg = shared["cfg"]
    profiled_kind = _profiled_kind(cfg, kind)
    if profiling.wraps(cfg.profiling, profiled_kind):
        ctx = mp.get_context("spawn")
    proc = ctx.Process(target=_process_main, args=(kind, a, b, shared), name=label, daemon=True)
    with (
        thread_limits(kind == "rollout" and cfg.force_envs_single_thread),
        profiling.launched_under_profiler(ctx, cfg.profiling, profiled_kind, label),
    ):
        proc.start()
    return proc


def _process_main(kind: str, a: int, b: int | None, shared: dict) -> None:
    parent = os.getppid()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from sf.utils.logging import setup_logging

    cfg = shared["cfg"]
    setup_logging(cfg.log_level)
    apply_process_settings(cfg, kind, a)
    restore_registry(shared["envs"])
    if _profiled_kind(cfg, kind) != "rollout":
        resources.start_gpu_meter(shared["device"], cfg.profiling_cuda_sync)
    queues = shared["queues"]
    runner_q = queues[RUNNER]
    loop = profile = None
    recorder = None
    exit_code = 0
    try:
        loop = _build_process(kind, a, b, shared)
        if cfg.profiling_timeline:
            recorder = timeline.Recorder()
            loop.enable_timeline(recorder)
        store = shared["stores"][a if kind != "rollout" else 0]
        profile = profiling.attach(cfg.profiling, _profiled_kind(cfg, kind), _process_label(kind, a, b), loop, store)
        if profile is not None:
            profile.begin()
        loop.every(PARENT_CHECK_S, partial(_stop_if_orphaned, parent))
        loop.run()
    except StopLoop:
        pass
    except Exception:
        exit_code = 1
        names = ", ".join(loop.components) if loop else _process_label(kind, a, b)
        runner_q.put((RUNNER, "error", names, traceback.format_exc()), timeout=5.0)
    if loop is not None:
        for name, message in loop.stop_components():
            exit_code = 1
            runner_q.put((RUNNER, "error", name, message), timeout=5.0)
        _share_timings(loop, runner_q, kind="profile")
    if recorder is not None:
        recorder.dump(timeline.part_path(cfg.profiling.output_dir, _process_label(kind, a, b)))
    if profile is not None:
        profile.end()
    os._exit(exit_code)


def _build_process(kind: str, a: int, b: int | None, shared: dict):
    from sf.runtime.batcher import Batcher
    from sf.runtime.checkpoint import CheckpointManager
    from sf.runtime.inference_worker import InferenceWorker
    from sf.runtime.learner import Learner
    from sf.runtime.rollout_worker import RolloutWorker

    cfg, env_info, buffers, queues = shared["cfg"], shared["env_info"], shared["buffers"], shared["queues"]
    device = shared["device"]
    inbox = queues[{"rollout": rollout_worker_name(a), "inference": policy_queue_name(a)}.get(kind, learner_name(a))]
    loop = EventLoop(inbox=inbox, routes=_routes(cfg, queues), stop_event=shared["stop_event"])
    if kind == "rollout":
        loop.add(RolloutWorker(cfg, a, buffers))
        if cfg.inference_placement == "rollout_worker":
            for p in range(cfg.num_policies):
                model = build_model(cfg, env_info, device, seed_offset=p)
                loop.add(
                    InferenceWorker(cfg, p, a, buffers, model, shared["stores"][p], device),
                    aliases=(policy_queue_name(p),),
                )
            _seed_sampling(cfg, a)
    elif kind == "inference":
        store = shared["stores"][a]
        model = build_model(cfg, env_info, device, seed_offset=a)
        loop.add(InferenceWorker(cfg, a, b, buffers, model, store, device), aliases=(policy_queue_name(a),))
        _seed_sampling(cfg, b * cfg.num_policies + a)
    else:
        store = shared["stores"][a]
        model = build_model(cfg, env_info, device, seed_offset=a)
        model.load_state_dict(store.params)
        checkpoints = CheckpointManager(shared["experiment_dir"], a, cfg.keep_checkpoints, cfg.save_milestones_sec)
        loop.add(Learner(cfg, a, model, store, device, checkpoints, env_info.reward_scale))
        loop.add(Batcher(cfg, a, buffers, env_info.frameskip))
    loop.every(cfg.experiment_summaries_interval, lambda: _share_timings(loop, queues[RUNNER]))
    return loop


def _seed_sampling(cfg, index: int) -> None:
    """Each process running inference draws its own action samples: the model's weights come from the policy
    store, so the seed `build_model` used matters only for this stream, which would repeat in every such process."""
    if cfg.seed is not None:
        torch.manual_seed(cfg.seed * 7919 + 104_729 + index)


def _stop_if_orphaned(parent: int) -> None:
    """A component outlives the main process only by accident (it was killed): stop, closing the envs."""
    if os.getppid() != parent:
        log.warning("the main process (pid %d) is gone: stopping", parent)
        raise StopLoop


def _share_timings(loop: EventLoop, runner_q, kind: str = "timing") -> None:
    """Every component's tree, activity and process resources: periodic snapshots, or the final profile."""
    res = resources.snapshot().to_dict()
    for name, tree, activity in loop.profiles():
        runner_q.put((RUNNER, kind, name, os.getpid(), tree, res, activity), timeout=5.0)


def _collect_profiles(runner: Runner, inbox, processes: dict, expected: set[str], deadline: float) -> set[str]:
    """After stop: take the runner's remaining messages until every live process has sent its trees or the
    deadline passes; return the names of the components whose final trees arrived."""
    final: set[str] = set()
    handlers = dict(runner.handlers)
    handlers["profile"] = lambda name, *profile: (final.add(name), runner.on_profile(name, *profile))
    while time.monotonic() < deadline and not final >= expected:
        if all(p.exitcode is not None for p in processes.values()) and inbox.empty():
            break
        try:
            msgs = inbox.get_many(block=True, timeout=0.1)
        except faster_fifo.Empty:
            continue
        for _, kind, *payload in map(timeline.unwrap, msgs):
            if kind in (
                "profile",
                "timing",
                "error",
                "episodes",
                "learner_stats",
                "staleness",
                "node_stats",
                "node_restarted",
            ):
                try:
                    handlers[kind](*payload)
                except StopLoop:
                    pass
    return final


def _end_processes(processes: dict, reported: set[str], grace: float, crashed: bool, exit_wait_s: float) -> None:
    """Kill, with a warning, every process still running without having sent its trees; give the others
    `exit_wait_s` to exit (longer while profilers write their outputs)."""
    for label, proc in processes.items():
        if proc.exitcode is None and label not in reported:
            log.warning("%s", _kill_warning(label, grace, crashed))
            proc.kill()
    deadline = time.monotonic() + exit_wait_s
    for proc in processes.values():
        proc.join(timeout=max(0.0, deadline - time.monotonic()))
    for label, proc in processes.items():
        if proc.is_alive():
            log.warning("%s sent its profile but did not exit within %.0f s: killing it", label, exit_wait_s)
            proc.kill()
            proc.join(timeout=1.0)


def _kill_warning(label: str, grace: float, crashed: bool) -> str:
    lost = (
        " (most likely in the middle of a training iteration; no final checkpoint)"
        if label.startswith("Learner")
        else ""
    )
    if crashed:
        return f"{label} did not stop within {grace:.0f} s after the failure{lost}: killing it"
    return (
        f"{label} did not stop within --stop_timeout_sec={grace:.0f} s{lost}: killing it; "
        f"raise --stop_timeout_sec to let it finish"
    )
