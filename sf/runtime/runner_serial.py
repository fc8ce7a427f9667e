"""Serial placement: every component on one event loop in this process, so cProfile, yappi or
pyinstrument see the whole program. Learner and inference worker share one model object."""
from __future__ import annotations

import logging
import os
import traceback

from sf.profiling import resources, timeline
from sf.runtime.batcher import Batcher
from sf.runtime.checkpoint import CheckpointManager
from sf.runtime.event_loop import EventLoop
from sf.runtime.experiment import Experiment
from sf.runtime.inference_worker import InferenceWorker
from sf.runtime.learner import Learner
from sf.runtime.names import RUNNER, policy_queue_name
from sf.runtime.policy_store import LocalPolicyStore
from sf.runtime.rollout_worker import RolloutWorker
from sf.runtime.runner import Runner
from sf.runtime.setup import EnvInfo, build_buffers, build_model

log = logging.getLogger("sf")


def run_serial(cfg, experiment: Experiment, env_info: EnvInfo, device: str, stop_event) -> dict:
    runner = Runner(cfg, experiment)
    loop = EventLoop(stop_event=stop_event)
    models = [build_model(cfg, env_info, device, seed_offset=p) for p in range(cfg.num_policies)]
    buffers = build_buffers(cfg, env_info, models[0].rnn_state_size, shared=False)
    for p, model in enumerate(models):
        store = LocalPolicyStore()
        checkpoints = CheckpointManager(experiment.dir, p, cfg.keep_checkpoints, cfg.save_milestones_sec)
        loop.add(Learner(cfg, p, model, store, device, checkpoints, env_info.reward_scale))
        loop.add(Batcher(cfg, p, buffers, env_info.frameskip))
        loop.add(InferenceWorker(cfg, p, 0, buffers, model, store, device), aliases=(policy_queue_name(p),))
    for w in range(cfg.num_workers):
        loop.add(RolloutWorker(cfg, w, buffers))
    loop.add(runner)
    loop.every(cfg.experiment_summaries_interval, lambda: _share_timings(loop))

    resources.start_gpu_meter(device, cfg.profiling_cuda_sync)
    if cfg.profiling_timeline:
        runner.timeline = timeline.Recorder()
        loop.enable_timeline(runner.timeline)
    with runner.timing.add_time("main_loop"):
        try:
            loop.run()
        except Exception:
            runner.stop_status, runner.error = "error", traceback.format_exc().strip().splitlines()[-1]
            log.error("serial run failed:\n%s", traceback.format_exc())
        if runner.stop_status is None:
            runner.stop_status = "interrupted" if stop_event.is_set() else "error"
        for name, message in loop.stop_components():
            log.error("%s failed while stopping:\n%s", name, message)
        loop.deliver_local(RUNNER)
        profiles = loop.profiles()
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
            loop.send(RUNNER, "timing", name, os.getpid(), tree, res, activity)
