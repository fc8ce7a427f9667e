"""A training entry point for the healing tests, as a user's script makes it: its env (`training_info_cartpole`)
notes every `set_training_info` call in `<experiment>/training_info.log` (`<pid> <approx_total_training_steps>`) and
runs beside a helper process of its own, as a simulator's engine does (`<experiment>/engines/<worker pid>.<helper
pid>`, ended when the env closes); an observer starts a subprocess of its own when the run starts (its pid in
`<experiment>/observer_child.pid`) and ends it when the run stops."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sf.cfg.arguments import main_cfg_or_exit  # noqa: E402
from sf.envs import register_env  # noqa: E402
from sf.envs.training_info import TrainingInfoInterface  # noqa: E402
from sf.runner.observers import AlgoObserver  # noqa: E402
from sf.train import ExperimentStatus, make_runner  # noqa: E402


class TrainingInfoNoted(gym.Wrapper, TrainingInfoInterface):
    def __init__(self, env, exp: Path):
        gym.Wrapper.__init__(self, env)
        TrainingInfoInterface.__init__(self)
        self.log = exp / "training_info.log"
        self.engine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        (exp / "engines").mkdir(exist_ok=True)
        (exp / "engines" / f"{os.getpid()}.{self.engine.pid}").touch()

    def close(self) -> None:
        self.engine.kill()
        self.engine.wait()
        super().close()

    def set_training_info(self, training_info: dict) -> None:
        super().set_training_info(training_info)
        with open(self.log, "a") as f:  # one short write in append mode: lines of several processes never mix
            f.write(f"{os.getpid()} {training_info['approx_total_training_steps']}\n")


def make_env(full_env_name, cfg, env_config=None, render_mode=None):
    return TrainingInfoNoted(gym.make("CartPole-v1"), Path(cfg.train_dir, cfg.experiment))


class StartsAHelper(AlgoObserver):
    """A user's observer with a process of its own (a log shipper, a simulator server)."""

    def __init__(self, exp: Path):
        self.exp = exp
        self.child: subprocess.Popen | None = None

    def on_start(self, runner) -> None:
        self.child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        (self.exp / "observer_child.pid").write_text(str(self.child.pid))

    def on_stop(self, runner) -> None:
        if self.child is not None:
            self.child.kill()
            self.child.wait()


def main() -> int:
    register_env("training_info_cartpole", make_env)
    cfg, runner = make_runner(main_cfg_or_exit(sys.argv[1:]))
    runner.register_observer(StartsAHelper(Path(cfg.train_dir, cfg.experiment)))
    status = runner.init()
    return runner.run() if status == ExperimentStatus.SUCCESS else status


if __name__ == "__main__":
    sys.exit(main())
