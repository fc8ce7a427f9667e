"""Parallel placement: each rollout worker, each inference worker and each learner (with its batcher) in
its own process; the runner stays in this one. With `--inference_placement=rollout_worker` (the default for
small models on the CPU) there are no inference processes: each rollout worker's process also holds an inference
worker of each policy, serving that worker alone through the local deque.

The supervisor (`sf.supervision.supervisor`) owns the processes: it starts them (forked from a server that has imported
torch and sf once, or spawned where an external profiler wraps them, through `start_component_process`), links each
to this process (a component stops by itself within a second of the main process's death), watches them (an exit,
the fork server's death or a missing heartbeat ends the run within seconds) and ends them in order.

Stopping: the main process alone reacts to SIGINT and SIGTERM (component processes leave both to it), sets
the stop flag, and gives the components `--stop_timeout_sec` to finish the message at hand (a learner its
training iteration), save and send their final trees; after a crash the survivors get `CRASH_GRACE_S`,
since one may be stuck on a queue the dead process held: such a queue stays locked for good (`sf.runner.mailbox`),
and this process reads its own inbox through a thread so that it never waits on one without a deadline. A process
still running then is killed, with a warning, and processes left behind by killed components (env engines) are
ended too.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import signal
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

import faster_fifo
import faster_fifo_reduction  # noqa: F401  (lets queues travel to spawned processes)
import torch
import torch.multiprocessing  # noqa: F401  (shares tensors with spawned processes by file descriptor)

from sf.envs.registry import registry_snapshot, restore_registry
from sf.envs.spaces import EnvInfo
from sf.experiment.checkpoint import Loaded
from sf.experiment.folder import Experiment
from sf.experiment.lock import share_held
from sf.model.factory import model_factory_snapshot, restore_model_factory
from sf.profiling import launch as profiling
from sf.profiling import resources, timeline
from sf.profiling.live_feed import snapshot_interval
from sf.runner.build import ComponentInputs, build_buffers, build_components, build_model
from sf.runner.mailbox import Mailbox
from sf.runner.observers import Registrations
from sf.runner.process_context import ProcessContext
from sf.runner.runner import Runner
from sf.runner.settings import RunSettings
from sf.runtime.event_loop import EventLoop, StopLoop
from sf.runtime.kernel_compile import compile_kernels
from sf.runtime.messages import ComponentError, FinalProfile, ProfileSnapshot, encode, unwrap
from sf.runtime.policy_store import SharedPolicyStore
from sf.supervision import process_start
from sf.supervision.engine_watch import EngineWatch
from sf.supervision.healer import Healer, Process
from sf.supervision.incarnations import ORIGINAL, Fence, Incarnations, WorkerIncarnations
from sf.supervision.orphans import named_semaphores
from sf.supervision.parent_link import ParentLink
from sf.supervision.process_start import STOP_SIGNALS
from sf.supervision.shared_flags import Heartbeat
from sf.supervision.shm_names import Ledger
from sf.supervision.supervisor import HEARTBEAT_S, START_LIMIT_S, Supervisor
from sf.utils.errors import exception_line
from sf.utils.process_settings import apply_process_settings, thread_limits
from sf.utils.roles import (
    RUNNER,
    batcher_name,
    inference_worker_name,
    learner_name,
    policy_queue_name,
    rollout_worker_name,
)

log = logging.getLogger("sf")

QUEUE_BYTES = 4 * 1024 * 1024
MAX_SPARE_QUEUES = 32
CRASH_GRACE_S = 3.0  # after a component died: the run must end within seconds, whatever the others do
EXIT_WAIT_S = 2.0  # a process that has sent its final trees only has to exit
WATCH_S = 0.1  # how often the runner looks for a dead component: a few waitpid calls


def run_parallel(
    cfg,
    experiment: Experiment,
    env_info: EnvInfo,
    settings: RunSettings,
    stop_event_local,
    cluster=None,
    resume: dict[int, Loaded] | None = None,
    registrations: Registrations | None = None,
) -> dict:
    """`cluster` (sf.distributed.backend.RayPlacement) keeps some rollout workers here and runs the others on
    other nodes, under links that the runner watches and stops like its own processes. `resume`: the checkpoint each
    policy continues from (`sf.experiment.resume`); its weights are in the policy store before any process starts.
    `registrations`: the user's observers (`sf.runner.observers`), called by the runner in this process."""
    run = ParallelRun(cfg, experiment, env_info, settings, stop_event_local, cluster, resume or {}, registrations)
    runner = run.runner
    with runner.timing.add_time("main_loop"):
        try:
            run.start()
            run.loop.run()
        except Exception as exc:
            runner.stop.ask("error", exception_line(exc))
            log.error("runner failed:\n%s", traceback.format_exc())
        finally:
            run.stop()
    runner.stop.ask("interrupted")  # the loop ended without a reason: only a signal ends it so
    return runner.finish()


class ParallelRun:
    """One parallel run in four steps: built (`__init__`: buffers, stores, queues, the runner and its loop), started
    (`start`: the component processes), watched (`watch`, every WATCH_S on the runner's loop) and stopped (`stop`)."""

    def __init__(self, cfg, experiment, env_info, settings, stop_event_local, cluster, resume, registrations):
        self.cfg, self.cluster, self.stop_event_local = cfg, cluster, stop_event_local
        local_workers = tuple(range(cfg.num_workers)) if cluster is None else cluster.local_workers
        self.specs = [("learner", p, None) for p in range(cfg.num_policies)]
        if local_workers and not settings.colocated:
            self.specs += [
                ("inference", p, i) for p in range(cfg.num_policies) for i in range(cfg.policy_workers_per_policy)
            ]
        self.specs += [("rollout", w, None) for w in local_workers]
        self.supervisor = Supervisor(len(self.specs), cfg.heartbeat_timeout_sec)
        control = self.supervisor.control  # the stop flag every process reads, and their heartbeats
        model = build_model(cfg, env_info, "cpu")
        buffers = build_buffers(cfg, env_info, model.rnn_state_size, shared=True)
        compile_kernels(cfg, model, buffers, settings.device)  # before the runner's clock starts and any component
        del model
        stores = [
            SharedPolicyStore(build_model(cfg, env_info, "cpu", seed_offset=p), control)
            for p in range(cfg.num_policies)
        ]
        # the stores' locks are named semaphores that only this process's resource tracker would unlink: a SIGKILL to
        # the whole process group (`kill -9 -<pgid>`) takes the tracker too, so the guard, in a session of its own, does
        self.supervisor.own(named_semaphores(os.getpid()))
        for p, loaded in resume.items():  # every rollout worker acts with the resumed weights from its first step
            stores[p].publish_state(loaded.state["model"], loaded.state["version"])
        queues = _queues(cfg, settings, local_workers, cluster)
        processes = {
            _process_label(kind, a, b): Process(kind, a, b, slot) for slot, (kind, a, b) in enumerate(self.specs)
        }
        incarnations = Incarnations(len(self.specs), cfg.num_workers, cfg.num_policies, mp.get_context("spawn"))
        spares = [faster_fifo.Queue(QUEUE_BYTES) for _ in range(_spare_queues(cfg, processes))]
        self.ctx = ProcessContext(
            cfg=cfg,
            settings=settings,
            env_info=env_info,
            buffers=buffers,
            stores=stores,
            queues=queues,
            control=control,
            experiment_dir=str(experiment.dir),
            envs=registry_snapshot(),
            models=model_factory_snapshot(),
            ledger=str(self.supervisor.ledger.path),
            resume={p: loaded.path for p, loaded in resume.items()},
            incarnations=incarnations,
            spares=spares,
            lock=share_held(),
        )
        self.runner = Runner(
            cfg, experiment, on_stop_request=control.set, registrations=registrations, env_info=env_info
        )
        self.expected = {_process_label(*spec) for spec in self.specs} | {
            batcher_name(p) for p in range(cfg.num_policies)
        }
        if settings.colocated:
            self.expected |= {inference_worker_name(p, w) for p in range(cfg.num_policies) for w in local_workers}
        if cluster is not None:
            self.runner.nodes.update({name: cluster.driver.to_dict() for name in self.expected | {RUNNER}})
            self.expected |= cluster.component_names()
        self.mailbox = Mailbox(queues[RUNNER]).start()
        routes = {name: self.mailbox.sender(queue) for name, queue in _routes(cfg, queues).items()}
        self.loop = EventLoop(inbox=self.mailbox, routes=routes, stop_event=control)
        self.loop.add(self.runner)
        if cfg.profiling_timeline:
            self.runner.timeline = timeline.Recorder()
            self.loop.enable_timeline(self.runner.timeline)
        self.healer = Healer(cfg, self.supervisor, incarnations, queues, spares, processes, settings.colocated)
        self.runner.healer = self.healer
        self.loop.fence = Fence(incarnations, None, [self.mailbox.sender(queue) for queue in spares], self.loop)
        self.healer.follow = partial(_follow_restarts, self.loop, self.mailbox)
        self.loop.every(WATCH_S, self.watch, owner=self.runner)
        self.profile = profiling.attach(cfg.profiling, "runner", RUNNER, self.loop, stores[0])

    def start(self) -> None:
        """The observers' start, the cluster's links, then every component process, each with SIGINT and SIGTERM
        blocked (all their threads, and the processes they start, such as VizDoom engines, inherit the mask): only
        this process reacts, by stopping the run in order, so a signal to the whole process group cannot end an
        engine or a learner half-way."""
        runner, supervisor, ctx = self.runner, self.supervisor, self.ctx
        supervisor.begin()
        if self.profile is not None:
            self.profile.begin()
        runner.init_observers()
        if self.cluster is not None:  # first: other nodes start their agents while this one starts its processes
            links = self.cluster.start_links(ctx, runner.nodes, partial(_grace, self.cfg, runner))
            for name, link in links.items():
                supervisor.add(name, link)
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            with runner.timing.add_time("start_processes"):
                start_ctx = supervisor.context(
                    process_start.preload_modules(ctx.envs), self.cfg.force_envs_single_thread
                )
                for slot, (kind, a, b) in enumerate(self.specs):
                    start_component_process(supervisor, start_ctx, kind, a, b, ctx, slot)
                    log.info(
                        "started %s pid=%d",
                        _process_label(kind, a, b),
                        supervisor.children[_process_label(kind, a, b)].pid,
                    )
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        self.healer.start = partial(_restart_process, supervisor, start_ctx, ctx)

    def watch(self) -> None:
        """A stop asked by a signal, a component process that died (healed where it can be), the inbox failing."""
        runner = self.runner
        if self.stop_event_local.is_set():
            runner.request_stop("interrupted")
        for failure in self.supervisor.poll():
            error = self.healer.take(failure) if not runner.stop.status else str(failure)
            if error is not None:
                runner.request_stop("error", error)
        error = self.healer.poll()
        if error is not None:
            runner.request_stop("error", error)
        if self.mailbox.error is not None:
            runner.request_stop("error", f"the runner's inbox: {self.mailbox.error}")

    def stop(self) -> None:
        """Every component gets the grace to finish and send its final trees; then the processes end, in order."""
        runner = self.runner
        self.ctx.control.set()
        self.loop.measure()
        with runner.timing.add_time("wait_shutdown"):
            crashed = runner.stop.status == "error"
            grace = _grace(self.cfg, runner)
            log.info(
                "stopping (%s%s): waiting up to %.0f s for every component to finish and save",
                runner.stop.status or "interrupted",
                f": {runner.stop.error}" if runner.stop.error else "",
                grace,
            )
            reported = _collect_profiles(runner, self.mailbox, self.supervisor, self.expected, time.monotonic() + grace)
            if self.profile is not None:
                self.profile.end()
            starting = frozenset(learner_name(p) for p in runner.progress.starting())  # they trained nothing yet
            exit_wait = profiling.join_wait_s(self.cfg.profiling, EXIT_WAIT_S)
            self.supervisor.stop(reported, grace, crashed, exit_wait, starting)
            self.mailbox.close()


def _queues(cfg, settings: RunSettings, local_workers: tuple[int, ...], cluster) -> dict:
    """Every inbox of the run by name: the runner's, each policy's (inference) and learner's, each rollout worker's;
    a remote rollout worker's messages go to its node's link."""
    queues = {RUNNER: faster_fifo.Queue(QUEUE_BYTES)}
    for p in range(cfg.num_policies):
        if not settings.colocated:
            queues[policy_queue_name(p)] = faster_fifo.Queue(QUEUE_BYTES)
        queues[learner_name(p)] = faster_fifo.Queue(QUEUE_BYTES)
    for w in local_workers:
        queues[rollout_worker_name(w)] = faster_fifo.Queue(QUEUE_BYTES)
    if cluster is not None:
        queues.update(cluster.routes())
    return queues


def _spare_queues(cfg, processes: dict[str, Process]) -> int:
    """The spare pool: a replacement never reads the inbox a dead process waited on (`sf.supervision.incarnations`),
    so each restart takes a fresh queue, and a spare nobody uses any more goes back to the pool. The first restart of
    a process retires one of the queues the run started with for good: one spare per restartable process, a few for
    restarts under way, at most `MAX_SPARE_QUEUES` (each 4 MiB of address space, touched only once used)."""
    if not cfg.restart_failed_components:
        return 0
    restartable = sum(process.kind in ("rollout", "inference") for process in processes.values())
    return min(MAX_SPARE_QUEUES, restartable + 4)


def _restart_process(supervisor: Supervisor, start_ctx, ctx: ProcessContext, process: Process) -> int:
    """Start a dead component process again, as itself (same name and heartbeat slot): the healer's `start`."""
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        start_component_process(supervisor, start_ctx, process.kind, process.a, process.b, ctx, process.slot)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    return supervisor.children[_process_label(process.kind, process.a, process.b)].pid


def _follow_restarts(loop: EventLoop, mailbox: Mailbox):
    """The runner's routes to a restarted component (training info, reward shaping) move with it now; returns whether
    the messages sent on the old routes have left (before that, the queue left behind is not renewed)."""
    loop.fence.catch_up()
    mark = mailbox.mark()
    return partial(mailbox.handled, mark)


def _grace(cfg, runner: Runner) -> float:
    """Seconds the components get to stop: --stop_timeout_sec, or CRASH_GRACE_S after a failure."""
    return min(CRASH_GRACE_S, cfg.stop_timeout_sec) if runner.stop.status == "error" else cfg.stop_timeout_sec


def _process_label(kind: str, a: int, b: int | None) -> str:
    return {"learner": learner_name(a), "rollout": rollout_worker_name(a)}.get(kind) or inference_worker_name(a, b)


def _profiled_kind(settings: RunSettings, kind: str) -> str:
    """The kind of process as profiling selects it: a rollout worker's process may also hold inference workers."""
    return "rollout_inference" if kind == "rollout" and settings.colocated else kind


def _routes(cfg, queues: dict) -> dict:
    routes = {name: q for name, q in queues.items()}
    for p in range(cfg.num_policies):
        routes[batcher_name(p)] = queues[learner_name(p)]
    return routes


def start_component_process(
    supervisor: Supervisor, start_ctx, kind: str, a: int, b: int | None, ctx: ProcessContext, slot: int
):
    """Start one component process under `supervisor`, with heartbeat slot `slot`. The single place to change how a
    kind of process is launched: from `start_ctx`, or spawned under the profiler's wrapper script when an external
    profiler covers it."""
    label = _process_label(kind, a, b)
    profiled_kind = _profiled_kind(ctx.settings, kind)
    if profiling.wraps(ctx.cfg.profiling, profiled_kind):
        start_ctx = mp.get_context("spawn")
    proc = start_ctx.Process(target=_process_main, args=(kind, a, b, ctx, slot), name=label, daemon=True)
    return supervisor.start(label, proc, slot, _launch(start_ctx, ctx.cfg, profiled_kind, kind, label))


@contextmanager
def _launch(start_ctx, cfg, profiled_kind: str, kind: str, label: str) -> Iterator[None]:
    """What surrounds the start of a component process: its math libraries' threads, an external profiler."""
    with (
        thread_limits(kind == "rollout" and cfg.force_envs_single_thread),
        profiling.launched_under_profiler(start_ctx, cfg.profiling, profiled_kind, label),
    ):
        yield


def _process_main(kind: str, a: int, b: int | None, ctx: ProcessContext, slot: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from sf.utils.logging import setup_logging

    cfg, control, label = ctx.cfg, ctx.control, _process_label(kind, a, b)
    heartbeat = Heartbeat(control, slot, HEARTBEAT_S, START_LIMIT_S)
    link = ParentLink(control).start()  # the main process gone: stop, closing the envs
    setup_logging(cfg.log_level)
    apply_process_settings(cfg, kind, a)
    if cfg.seed is None:  # forked from one server, every process would inherit its generator: explore alike
        torch.manual_seed(int.from_bytes(os.urandom(8), "little"))
    restore_registry(ctx.envs)
    restore_model_factory(ctx.models)
    if _profiled_kind(ctx.settings, kind) != "rollout":
        resources.start_gpu_meter(ctx.settings.device, cfg.profiling_cuda_sync)
    runner_q = ctx.queues[RUNNER]
    loop = profile = None
    recorder = None
    exit_code = 0
    watch = EngineWatch(heartbeat, partial(_report, runner_q, link, label))
    if kind == "rollout":
        watch.start()
    try:
        loop = _build_process(kind, a, b, ctx, slot)
        loop.every(HEARTBEAT_S, heartbeat.beat)
        if cfg.profiling_timeline:
            recorder = timeline.Recorder()
            loop.enable_timeline(recorder)
        store = ctx.stores[a if kind != "rollout" else 0]
        profile = profiling.attach(cfg.profiling, _profiled_kind(ctx.settings, kind), label, loop, store)
        if profile is not None:
            profile.begin()
        loop.run()
    except StopLoop:
        pass
    except Exception:
        exit_code = 1
        names = (loop.failed or ", ".join(loop.components)) if loop else label
        _report(runner_q, link, names, traceback.format_exc())
    watch.disarm()
    if loop is not None:
        for name, message in loop.stop_components():
            exit_code = 1
            _report(runner_q, link, name, message)
        if not link.gone:  # nobody reads the trees of a run whose main process is gone
            _share_timings(loop, runner_q, final=True)
    if recorder is not None:
        recorder.dump(timeline.part_path(cfg.profiling.output_dir, label))
    if profile is not None:
        profile.end()
    os._exit(exit_code)


def _report(runner_q, link: ParentLink, name: str, message: str) -> None:
    """A component's error, to the runner; nobody reads it once the main process is gone."""
    if not link.gone:
        runner_q.put(encode(RUNNER, ComponentError(name, message)), timeout=5.0)


def _build_process(kind: str, a: int, b: int | None, ctx: ProcessContext, slot: int) -> EventLoop:
    """This process's loop with its components (`build_components`), reading its inbox: a fresh queue when it was
    restarted or its policy's inbox was replaced (`sf.supervision.incarnations`)."""
    cfg, inc = ctx.cfg, ctx.incarnations
    inbox = ctx.queues[
        {"rollout": rollout_worker_name(a), "inference": policy_queue_name(a)}.get(kind, learner_name(a))
    ]
    if inc is not None and kind in ("rollout", "inference"):
        index = (inc.worker_inbox if kind == "rollout" else inc.policy_inbox)[a]
        if index != ORIGINAL:
            inbox = ctx.spares[index]

    def model_for(policy: int):
        model = build_model(cfg, ctx.env_info, ctx.settings.device, seed_offset=policy)
        if kind == "learner":
            model.load_state_dict(ctx.stores[policy].params)
        return model

    inputs = ComponentInputs(
        cfg=cfg,
        env_info=ctx.env_info,
        device=ctx.settings.device,
        colocated=ctx.settings.colocated,
        buffers=ctx.buffers,
        stores=ctx.stores,
        model_for=model_for,
        experiment_dir=ctx.experiment_dir,
        ledger=Ledger(ctx.ledger) if kind == "rollout" else None,
        resume=ctx.resume,
        incarnations=WorkerIncarnations(inc, slot) if inc is not None else None,
    )
    loop = EventLoop(inbox=inbox, routes=_routes(cfg, ctx.queues), stop_event=ctx.control)
    for component, aliases in build_components(kind, a, b, inputs):
        loop.add(component, aliases=aliases)
    if kind == "rollout" and ctx.settings.colocated:
        _seed_sampling(cfg, a)
    elif kind == "inference":
        _seed_sampling(cfg, b * cfg.num_policies + a)
    loop.every(snapshot_interval(cfg), lambda: _share_timings(loop, ctx.queues[RUNNER]))
    if inc is not None:
        loop.fence = Fence(inc, slot, ctx.spares, loop)
    return loop


def _seed_sampling(cfg, index: int) -> None:
    """Each process running inference draws its own action samples: the model's weights come from the policy
    store, so the seed `build_model` used matters only for this stream, which would repeat in every such process."""
    if cfg.seed is not None:
        torch.manual_seed(cfg.seed * 7919 + 104_729 + index)


def _share_timings(loop: EventLoop, runner_q, final: bool = False) -> None:
    """Every component's tree, activity and process resources: periodic snapshots, or the final profile."""
    res, pid = resources.snapshot().to_dict(), os.getpid()
    for name, tree, activity in loop.profiles():
        if final:
            msg = FinalProfile(name, pid, tree, res, activity)
        else:
            msg = ProfileSnapshot(name, pid, tree, res, activity)
        runner_q.put(encode(RUNNER, msg), timeout=5.0)


def _collect_profiles(runner: Runner, inbox: Mailbox, supervisor: Supervisor, expected: set[str], deadline: float):
    """After stop: take the runner's remaining messages until every live process has sent its trees or the
    deadline passes; return the names of the components whose final trees arrived."""
    final: set[str] = set()

    def on_final_profile(msg: FinalProfile) -> None:
        final.add(msg.component)
        runner.handlers[FinalProfile](msg)

    handlers = {**runner.handlers, FinalProfile: on_final_profile}
    while time.monotonic() < deadline and not final >= expected:
        if supervisor.all_ended() and inbox.empty():
            break
        try:
            msgs = inbox.get_many(block=True, timeout=0.1)
        except faster_fifo.Empty:
            continue
        for _, msg in msgs:
            msg = unwrap(msg)
            handler = handlers.get(type(msg))
            if handler is None:
                continue
            try:
                handler(msg)
            except StopLoop:
                pass
    return final
