"""The faults: what each does to a running training, when, and what the run must answer with."""

from __future__ import annotations

import os
import re
import resource
import signal
from dataclasses import dataclass
from pathlib import Path

MAIN = "main process"
FORK_SERVER = "fork server"
REPLACED_LEARNER = "the learner of the policy being replaced"  # PBT's weight copy under way: its target
LEARNER = "Learner 0"
INFERENCE = "InferenceWorker_p0-w0"
ROLLOUT = "RolloutWorker_w{}"
ENGINE = "VizDoom engine of RolloutWorker_w{}"
COMPONENTS = (LEARNER, INFERENCE, "RolloutWorker_w0", "RolloutWorker_w1")
DISK_LIMIT_BYTES = 1024  # RLIMIT_FSIZE of a learner whose disk is "full": every checkpoint is larger


@dataclass(frozen=True)
class Fault:
    """`target` names the process it hits (`{}`: a rollout worker drawn at random); `expect_exit` and `expect_error`
    (a regular expression for summary.json's `error`, `{target}` filled in) say how the run must end. A fault that
    `heals` (on a rollout worker, its engine or an inference worker) must not end the run: the component is started
    again and training goes on, until the trial stops the run with SIGTERM (exit 0, status interrupted)."""

    name: str
    target: str
    expect_exit: tuple[int, ...]
    expect_status: str | None  # None: no summary.json (the process that writes it was killed)
    expect_error: str | None = None
    doom_only: bool = False
    heartbeat: bool = False  # detected only after --heartbeat_timeout_sec
    after_checkpoints: int = 0  # checkpoints to wait for before the fault's moment is drawn
    heals: bool = False
    in_replacement: bool = False  # a population's run (the pbt family): it hits while a weight copy is under way

    def heals_on(self, target: str) -> bool:
        """Whether the run goes on after this fault hits `target` (a learner or the main process never heals)."""
        return self.heals and target not in (LEARNER, MAIN, FORK_SERVER)


FAULTS: dict[str, Fault] = {
    f.name: f
    for f in (
        Fault("sigkill_main", MAIN, (-signal.SIGKILL,), None),
        Fault("sigkill_group", MAIN, (-signal.SIGKILL,), None),  # `kill -9 -<pgid>`: every process of the run at once
        Fault("sigkill_fork_server", FORK_SERVER, (1,), "error", r"^the fork server \(pid \d+\) died$"),
        Fault("sigkill_learner", LEARNER, (1,), "error", r"^{target} exited with code -9 \(SIGKILL\)$"),
        Fault("sigkill_inference", INFERENCE, (0,), "interrupted", heals=True),
        Fault("sigkill_rollout", ROLLOUT, (0,), "interrupted", heals=True),
        Fault("sigkill_engine", ENGINE, (0,), "interrupted", doom_only=True, heals=True),
        Fault("sigterm_main", MAIN, (0,), "interrupted"),
        Fault(  # the learner cannot heal: its heartbeat's end ends the run
            "sigstop_component",
            "component",
            (1,),
            "error",
            r"^{target} \(pid \d+\) sent no heartbeat for \d+ s \(--heartbeat_timeout_sec\): stopped or hung$",
            heartbeat=True,
            heals=True,
        ),
        Fault(
            "disk_full",
            LEARNER,
            (1,),
            "error",
            r"^Learner 0: CheckpointError: cannot save checkpoint \S+/checkpoint_p0/checkpoint_\d+_\d+\.pth: "
            r"File too large \(errno 27\)$",
            after_checkpoints=1,
        ),
        Fault("corrupt_checkpoint", MAIN, (0,), "interrupted", after_checkpoints=2),
        Fault("sigkill_main_in_replacement", MAIN, (-signal.SIGKILL,), None, in_replacement=True),
        Fault(
            "sigkill_learner_in_replacement",
            REPLACED_LEARNER,
            (1,),
            "error",
            r"^{target} exited with code -9 \(SIGKILL\)$",
            in_replacement=True,
        ),
    )
}


def expected_error(fault: Fault, target: str, worker: str | None) -> re.Pattern | None:
    if fault.expect_error is None:
        return None
    return re.compile(fault.expect_error.format(target=re.escape(target), worker=re.escape(worker or "")))


def inject(fault: Fault, pid: int) -> None:
    """Do it to `pid` (the corrupt-checkpoint fault stops the run cleanly here and truncates a file afterwards)."""
    if fault.name == "disk_full":
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (DISK_LIMIT_BYTES, DISK_LIMIT_BYTES))
    elif fault.name in ("sigterm_main", "corrupt_checkpoint"):
        os.kill(pid, signal.SIGTERM)
    elif fault.name == "sigkill_group":
        os.killpg(os.getpgid(pid), signal.SIGKILL)
    elif fault.name == "sigstop_component":
        os.kill(pid, signal.SIGSTOP)
    else:
        os.kill(pid, signal.SIGKILL)


def corrupt(path: Path) -> None:
    """Truncate a checkpoint to half its size, as a disk that filled up under a copy would."""
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.truncate(size // 2)
