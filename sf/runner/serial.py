"""Serial placement: every component on one event loop in this process, so cProfile, yappi or
pyinstrument see the whole program. Learner and inference worker share one model object.

SIGINT and SIGTERM stay blocked in the loop's thread while it runs: the processes envs start (VizDoom engines)
inherit the block, so a signal to the whole process group (Ctrl-C, `kill -TERM -<pgid>`) does not end an engine
before its worker closes it. A watchdog thread (`sf.supervision.serial_watch`) takes the signals and turns them into
the stop, and ends the run itself when the loop is stuck in a call that never returns: after a stop request that
does not finish within --stop_timeout_sec, or a loop silent for --heartbeat_timeout_sec. It then saves what can be
saved (the learners' checkpoints, each taken between two of its handlers: none when a learner is what is stuck),
writes the run's outputs and exits."""

from __future__ import annotations

import logging
import os
import signal
import traceback
from functools import partial

# torch.optim's constructor imports torch._dynamo on first use (0.8 s): imported with this module, it stays out of the
# run's clock (the parallel runner's learner process pays it while the other processes start)
import torch._dynamo  # noqa: F401

from sf.envs.spaces import EnvInfo
from sf.experiment.checkpoint import Loaded
from sf.experiment.folder import Experiment
from sf.experiment.lock import release_held
from sf.profiling import launch as profiling
from sf.profiling import resources, timeline
from sf.profiling.live_feed import snapshot_interval
from sf.runner.build import ComponentInputs, build_buffers, build_components, build_model
from sf.runner.observers import Registrations
from sf.runner.runner import Runner
from sf.runner.serial_healer import SerialHealer
from sf.runner.settings import RunSettings
from sf.runtime.event_loop import EventLoop
from sf.runtime.kernel_compile import compile_kernels
from sf.runtime.learner import Learner
from sf.runtime.messages import ProfileSnapshot
from sf.runtime.policy_store import LocalPolicyStore
from sf.runtime.rollout_worker import RolloutWorker
from sf.supervision.incarnations import Incarnations, WorkerIncarnations
from sf.supervision.process_start import STOP_SIGNALS
from sf.supervision.serial_watch import SerialWatch
from sf.supervision.supervisor import HEARTBEAT_S, Supervisor
from sf.utils.errors import exception_line, traceback_line
from sf.utils.roles import RUNNER

log = logging.getLogger("sf")

ENVS_STARTED_S = 1.0  # the first tick of this timer comes once every component started (and its envs)
FINAL_SAVE_WAIT_S = 2.0  # how long the watchdog waits for a learner to finish its handler before saving it


def run_serial(
    cfg,
    experiment: Experiment,
    env_info: EnvInfo,
    settings: RunSettings,
    stop_event,
    resume: dict[int, Loaded] | None = None,
    registrations: Registrations | None = None,
) -> dict:
    """`resume`: the checkpoint each policy continues from (`sf.experiment.resume`); `registrations`: the user's
    observers (`sf.runner.observers`)."""
    run = SerialRun(cfg, experiment, env_info, settings, stop_event, resume or {}, registrations)
    run.start()
    try:
        with run.runner.timing.add_time("main_loop"):
            run.train()
            profiles = run.stop()
    finally:
        run.release()
    return _outputs(run.runner, profiles)


class SerialRun:
    """One serial run: built (`__init__`: the models, buffers and every component on one loop), started (`start`:
    the watchdog takes the signals), trained (`train`: the loop until it stops), stopped (`stop`: the components'
    final saves and trees) and released (`release`: the signals given back, the env engines ended)."""

    def __init__(self, cfg, experiment, env_info, settings, stop_event, resume, registrations):
        device = settings.device
        self.stop_event = stop_event
        self.supervisor = Supervisor()
        models = [build_model(cfg, env_info, device, seed_offset=p) for p in range(cfg.num_policies)]
        buffers = build_buffers(cfg, env_info, models[0].rnn_state_size, shared=False)
        compile_kernels(cfg, models[0], buffers, device)  # before the runner's clock starts
        self.runner = runner = Runner(cfg, experiment, registrations=registrations, env_info=env_info)
        self.loop = loop = EventLoop(stop_event=stop_event)
        incarnations = Incarnations(1, cfg.num_workers, cfg.num_policies)  # in this process's memory
        inputs = ComponentInputs(
            cfg=cfg,
            env_info=env_info,
            device=device,
            colocated=False,
            buffers=buffers,
            stores=[LocalPolicyStore() for _ in models],
            model_for=models.__getitem__,  # learner and inference worker of a policy share its model
            experiment_dir=experiment.dir,
            ledger=self.supervisor.ledger,
            resume={p: loaded.path for p, loaded in resume.items()},
            incarnations=WorkerIncarnations(incarnations, 0),
        )
        for p in range(cfg.num_policies):
            for kind, index in (("learner", None), ("inference", 0)):
                for component, aliases in build_components(kind, p, index, inputs):
                    loop.add(component, aliases=aliases)

        def make_worker(index: int) -> RolloutWorker:
            (worker, _), *_ = build_components("rollout", index, None, inputs)
            return worker

        for w in range(cfg.num_workers):
            loop.add(make_worker(w))
        loop.add(runner)
        runner.healer = SerialHealer(cfg, loop, incarnations, make_worker)
        loop.on_failure = runner.healer.on_failure
        loop.every(snapshot_interval(cfg), lambda: _share_timings(loop))
        resources.start_gpu_meter(device, cfg.profiling_cuda_sync)
        if cfg.profiling_timeline:
            runner.timeline = timeline.Recorder()
            loop.enable_timeline(runner.timeline)
        self.profile = profiling.attach(cfg.profiling, "serial", "serial", loop)
        give_up = partial(_give_up, runner, loop, self.supervisor)
        self.watch = SerialWatch(cfg, loop, stop_event, give_up)
        loop.every(HEARTBEAT_S, self.watch.beat)

    def start(self) -> None:
        self.supervisor.begin()
        self.supervisor.follow_children(True)  # the env engines the rollout workers start
        self.loop.every(ENVS_STARTED_S, lambda: self.supervisor.follow_children(False))  # due at once after starts
        self.previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        self.watch.start()

    def train(self) -> None:
        runner, loop = self.runner, self.loop
        try:
            if self.profile is not None:
                self.profile.begin()
            runner.init_observers()
            loop.run()
        except Exception as exc:
            failed = f"{loop.failed}: " if loop.failed else ""
            runner.stop.ask("error", failed + exception_line(exc))
            log.error("serial run failed:\n%s", traceback.format_exc())
        self.watch.loop_returned()
        if self.profile is not None:
            self.profile.end()

    def stop(self) -> list[tuple[str, dict, dict]]:
        """The components' final saves and trees; every component's profile."""
        runner, loop = self.runner, self.loop
        if runner.stop.status is None:
            runner.stop.ask("interrupted" if self.stop_event.is_set() else "error")
            if self.stop_event.is_set():
                log.info("interrupted (SIGINT or SIGTERM): stopping with a final checkpoint, then the profiles")
        for name, message in loop.stop_components():
            log.error("%s failed while stopping:\n%s", name, message)
            runner.stop.ask("error", f"{name}: {traceback_line(message)}")  # the final checkpoint did not save
        loop.deliver_local(RUNNER)
        return loop.profiles()

    def release(self) -> None:
        self.watch.done()
        signal.pthread_sigmask(signal.SIG_SETMASK, self.previous_mask)
        self.supervisor.stop(set(), grace=0.0, crashed=False, exit_wait_s=0.0)


def _outputs(runner: Runner, profiles: list[tuple[str, dict, dict]]) -> dict:
    """Every component's profile into the runner's records, then the run's outputs; the summary."""
    res = resources.snapshot().to_dict()
    for name, tree, activity in profiles:
        if name != RUNNER:
            runner.on_profile(name, os.getpid(), tree, res, activity)
    return runner.finish()


def _give_up(runner: Runner, loop: EventLoop, supervisor: Supervisor, status: str, cause: str) -> None:
    """From the watchdog's thread, the loop's thread stuck for good: save the learners that are not what is stuck,
    write the outputs, end the env engines, exit. Never returns."""
    log.error("%s: ending the run without it", cause)
    runner.stop.ask(status, cause)
    for component in loop.components.values():
        if not isinstance(component, Learner):
            continue
        try:
            if not component.save_from_another_thread(FINAL_SAVE_WAIT_S):
                log.error("%s: no final checkpoint: it is busy (stuck, or too slow to wait for)", component.name)
        except Exception as exc:  # a failing disk: the run's end is already an error or an interruption
            log.error("%s: no final checkpoint: %s", component.name, exception_line(exc))
    summary = _outputs(runner, loop.profiles())
    supervisor.stop(set(), grace=0.0, crashed=True, exit_wait_s=0.0)
    release_held()
    logging.shutdown()
    os._exit(1 if summary["status"] == "error" else 0)


def _share_timings(loop: EventLoop) -> None:
    """Snapshots for TensorBoard: every component shares this process, hence its resources."""
    res = resources.snapshot().to_dict()
    for name, tree, activity in loop.profiles():
        if name != RUNNER:
            loop.send(RUNNER, ProfileSnapshot(name, os.getpid(), tree, res, activity))
