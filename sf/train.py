"""Entry point shared by every example: `run_rl(cfg)` trains and returns the process exit status."""
from __future__ import annotations

import logging
import signal
import threading
import traceback

from sf.cfg.arguments import describe_device, resolve_device
from sf.runtime.experiment import Experiment
from sf.runtime.setup import probe_env
from sf.utils.logging import setup_logging
from sf.utils.process_settings import apply_process_settings

log = logging.getLogger("sf")


def run_rl(cfg) -> int:
    """Train with the placement the config asks for; 0 when the run ended as planned, 1 otherwise."""
    experiment = Experiment(cfg)
    setup_logging(cfg.log_level, experiment.dir / "sf_log.txt" if cfg.log_to_file else None)
    experiment.write_config()
    try:
        env_info = probe_env(cfg)
    except Exception as exc:
        log.error("cannot train on env %r: %s", cfg.env, exc)
        experiment.write_json("summary.json", {"status": "error", "error": f"{type(exc).__name__}: {exc}",
                                               "env_frames": {}, "fps": 0.0, "fps_steady": None, "wall_time_s": 0.0,
                                               "avg_episode_reward": {}, "num_episodes": 0})
        return 1
    device = resolve_device(cfg)
    log.info("learner and inference on %s", describe_device(device))
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        if cfg.serial_mode:
            from sf.runtime.runner_serial import run_serial

            apply_process_settings(cfg, "serial", 0)
            summary = run_serial(cfg, experiment, env_info, device, stop)
        else:
            from sf.runtime.runner_parallel import run_parallel

            summary = run_parallel(cfg, experiment, env_info, device, stop)
    except Exception:
        log.error("run failed:\n%s", traceback.format_exc())
        return 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if summary["status"] == "error":
        log.error("run ended with an error: %s", summary["error"])
        return 1
    return 0
