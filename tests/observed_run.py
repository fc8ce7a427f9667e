"""A training run as a Sample Factory script makes it: `make_runner`, observers and an episode handler registered,
`init`, `run`. What the hooks saw goes to `<experiment>/observed.json` once the run is over:

    python tests/observed_run.py --env=cooperative_cue_resting --experiment=... --train_dir=...
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sf.envs.families import family_named  # noqa: E402
from sf.runner.observers import AlgoObserver  # noqa: E402
from sf.train import ExperimentStatus, make_runner  # noqa: E402


class Noting(AlgoObserver):
    def __init__(self):
        self.seen: dict = {"calls": [], "iterations": [], "summaries": [], "episodes": 0, "pid": os.getpid()}

    def _note(self, hook: str, runner) -> None:
        self.seen["calls"].append(hook)
        self.seen["thread"] = threading.current_thread().name
        self.seen["frames_at_" + hook] = sum(runner.env_steps.values())

    def on_init(self, runner) -> None:
        self._note("on_init", runner)

    def on_connect_components(self, runner) -> None:
        self._note("on_connect_components", runner)

    def on_start(self, runner) -> None:
        self._note("on_start", runner)

    def on_training_step(self, runner, training_iteration_since_resume: int) -> None:
        self._note("on_training_step", runner)
        self.seen["iterations"].append(training_iteration_since_resume)

    def extra_summaries(self, runner, policy_id: int, writer, env_steps: int) -> None:
        self._note("extra_summaries", runner)
        accuracy = runner.policy_avg_stats.get("accuracy")
        if accuracy:
            writer.add_scalar("custom/accuracy_seen", accuracy[policy_id][-1], env_steps)
        self.seen["summaries"].append([policy_id, env_steps])
        self.seen["avg_stats_keys"] = sorted(runner.policy_avg_stats)

    def on_stop(self, runner) -> None:
        self._note("on_stop", runner)

    def episodes(self, runner, msg: dict, policy_id: int) -> None:
        self.seen["episodes"] += 1
        self.seen["last_episode"] = msg


def main() -> int:
    cfg = family_named("multi_agent").cfg_or_exit(sys.argv[1:])
    cfg, runner = make_runner(cfg)
    observer = Noting()
    runner.register_observer(observer)
    runner.register_episodic_stats_handler(observer.episodes)
    status = runner.init()
    if status == ExperimentStatus.SUCCESS:
        status = runner.run()
    (Path(cfg.train_dir) / cfg.experiment / "observed.json").write_text(json.dumps(observer.seen))
    return status


if __name__ == "__main__":
    sys.exit(main())
