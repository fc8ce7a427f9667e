"""Serial placement: every component on one event loop in this process, so cProfile, yappi or
pyinstrument see the whole program. Learner and inference worker share one model object.

SIGINT and SIGTERM stay blocked while the loop runs, and a timer turns a pending one into the stop: the
processes envs start (VizDoom engines) inherit the block, so a signal to the whole process group (Ctrl-C,
`kill -TERM -<pgid>`) does not end an engine before its worker closes it."""

from __future__ import annotations

import logging
import os
import signal
import traceback
from pathlib import Path

# torch.optim's constructor imports torch._dynamo on first use (0.8 s): imported with this module, it stays out of the
# run's clock (the parallel runner's learner process pays it while the other processes start)
import torch._dynamo  # noqa: F401

from sf.envs.spaces import EnvInfo
from sf.profiling import launch as profiling
from sf.profiling import resources, timeline
from sf.profiling.live_feed import snapshot_interval
from sf.runtime.batcher import Batcher
from sf.runtime.checkpoint import CheckpointManager
from sf.runtime.errors import error_line, last_line
from sf.runtime.event_loop import EventLoop
from sf.runtime.experiment import Experiment
from sf.runtime.inference_worker import InferenceWorker
from sf.runtime.learner import Learner
from sf.runtime.messages import ProfileSnapshot
from sf.runtime.observers import Registrations
from sf.runtime.policy_store import LocalPolicyStore
from sf.runtime.process_start import STOP_SIGNALS
from sf.runtime.runner import Runner
from sf.runtime.setup import build_buffers, build_model, make_rollout_worker
from sf.runtime.supervisor import Supervisor
from sf.utils.roles import RUNNER, policy_queue_name

log = logging.getLogger("sf")

SIGNAL_CHECK_S = 0.2
ENVS_STARTED_S = 1.0  # the first tick of this timer comes once every component started (and its envs)


def run_serial(
    cfg,
    experiment: Experiment,
    env_info: EnvInfo,
    device: str,
    stop_event,
    resume: dict[int, Path] | None = None,
    registrations: Registrations | None = None,
) -> dict:
    """`resume`: the checkpoint each policy continues from (`sf.runtime.resume`); `registrations`: the user's
    observers (`sf.runtime.observers`)."""
    resume = resume or {}
    supervisor = Supervisor()
    runner = Runner(cfg, experiment, registrations=registrations)
    loop = EventLoop(stop_event=stop_event)
    models = [build_model(cfg, env_info, device, seed_offset=p) for p in range(cfg.num_policies)]
    buffers = build_buffers(cfg, env_info, models[0].rnn_state_size, shared=False)
    for p, model in enumerate(models):
        store = LocalPolicyStore()
        checkpoints = CheckpointManager(experiment.dir, p, cfg.keep_checkpoints, cfg.save_milestones_sec)
        loop.add(Learner(cfg, p, model, store, device, checkpoints, env_info.reward_scale, resume.get(p)))
        loop.add(Batcher(cfg, p, buffers, env_info.frameskip))
        loop.add(InferenceWorker(cfg, p, 0, buffers, model, store, device), aliases=(policy_queue_name(p),))
    for w in range(cfg.num_workers):
        loop.add(make_rollout_worker(cfg, w, buffers))
    loop.add(runner)
    loop.every(snapshot_interval(cfg), lambda: _share_timings(loop))

    resources.start_gpu_meter(device, cfg.profiling_cuda_sync)
    if cfg.profiling_timeline:
        runner.timeline = timeline.Recorder()
        loop.enable_timeline(runner.timeline)
    profile = profiling.attach(cfg.profiling, "serial", "serial", loop)
    loop.every(SIGNAL_CHECK_S, lambda: _take_stop_signal(stop_event))
    supervisor.begin()
    supervisor.follow_children(True)  # the env engines the rollout workers start
    loop.every(ENVS_STARTED_S, lambda: supervisor.follow_children(False))  # due at once after the starts
    previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        with runner.timing.add_time("main_loop"):
            try:
                if profile is not None:
                    profile.begin()
                runner.init_observers()
                loop.run()
            except Exception as exc:
                failed = f"{loop.failed}: " if loop.failed else ""
                runner.stop_status, runner.error = "error", failed + error_line(exc)
                log.error("serial run failed:\n%s", traceback.format_exc())
            if profile is not None:
                profile.end()
            if runner.stop_status is None:
                runner.stop_status = "interrupted" if stop_event.is_set() else "error"
            for name, message in loop.stop_components():
                log.error("%s failed while stopping:\n%s", name, message)
                if runner.stop_status != "error":  # the final checkpoint did not save: the run failed
                    runner.stop_status, runner.error = "error", f"{name}: {last_line(message)}"
            loop.deliver_local(RUNNER)
            profiles = loop.profiles()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
        supervisor.stop(set(), grace=0.0, crashed=False, exit_wait_s=0.0)
    res = resources.snapshot().to_dict()
    for name, tree, activity in profiles:
        if name != RUNNER:
            runner.on_profile(name, os.getpid(), tree, res, activity)
    return runner.finish()


def _share_timings(loop: EventLoop) -> None:
    """Snapshots for TensorBoard: every component shares this process, hence its resources."""
    res = resources.snapshot().to_dict()
    for name, tree, activity in loop.profiles():
        if name != RUNNER:
            loop.send(RUNNER, ProfileSnapshot(name, os.getpid(), tree, res, activity))


def _take_stop_signal(stop_event) -> None:
    if signal.sigpending() & STOP_SIGNALS:
        signal.sigtimedwait(STOP_SIGNALS, 0)
        stop_event.set()
