"""One training run of the learning comparison: a child process with its own experiment folder and log, and a
`.done.json` beside them once it finished, so a comparison cut short resumes where it stopped and a second
invocation with more sides or seeds reuses what is there.

    <out>/runs/<env>/<side>/seed<k>/        the experiment folder (config, TensorBoard files, checkpoints)
    <out>/runs/<env>/<side>/seed<k>.log     its console output
    <out>/runs/<env>/<side>/seed<k>.done.json   the command, its exit status and wall time
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from sf.bench.runs import STOP_GRACE_S, stop_process_group


@dataclass(frozen=True)
class Side:
    """A framework as the comparison runs it: its label, interpreter, and the sys.path entries its runs get."""

    label: str
    python: str
    pythonpath: tuple[str, ...] = ()  # put first on PYTHONPATH (an sf source tree)
    hidden: tuple[str, ...] = ()  # removed from PYTHONPATH (sf's tree, where sf_examples would shadow Sample Factory's)
    is_sf: bool = True

    @property
    def slug(self) -> str:
        return re.sub(r"[^A-Za-z0-9.]+", "_", self.label).strip("_").lower()

    def environ(self) -> dict[str, str]:
        hidden = {os.path.realpath(p) for p in self.hidden}
        inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        kept = [p for p in inherited if os.path.realpath(p) not in hidden]
        return dict(os.environ, PYTHONPATH=os.pathsep.join([*self.pythonpath, *kept]), PYTHONUNBUFFERED="1")


@dataclass(frozen=True)
class RunSpec:
    side: Side
    env: str
    seed: int
    command: tuple[str, ...]
    folder: Path  # <out>/runs/<env>/<side>

    @property
    def experiment_dir(self) -> Path:
        return self.folder / f"seed{self.seed}"

    @property
    def log_path(self) -> Path:
        return self.folder / f"seed{self.seed}.log"

    @property
    def done_path(self) -> Path:
        return self.folder / f"seed{self.seed}.done.json"

    def done(self) -> dict | None:
        """The record of a finished run, or None when it has not finished (or failed)."""
        if not self.done_path.is_file():
            return None
        record = json.loads(self.done_path.read_text())
        return record if record.get("returncode") == 0 else None


@dataclass(frozen=True)
class RunRecord:
    command: str
    pythonpath: str  # which sf tree ran (the command alone does not say)
    returncode: int
    wall_s: float
    finished: str  # local time, ISO format


def training_command(side: Side, module: str, flags: list[str], train_dir: Path, experiment: str) -> tuple[str, ...]:
    return (side.python, "-m", module, *flags, f"--train_dir={train_dir}", f"--experiment={experiment}")


def run(spec: RunSpec, timeout_s: float | None = None) -> RunRecord:
    """Run from scratch (an unfinished folder is removed first), wait, write the `.done.json` record."""
    spec.folder.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(spec.experiment_dir, ignore_errors=True)
    spec.done_path.unlink(missing_ok=True)
    start = time.monotonic()
    environ = spec.side.environ()
    with open(spec.log_path, "w") as log:
        proc = subprocess.Popen(
            spec.command,
            cwd=spec.folder,  # outside any source tree: `-m sf_examples...` resolves through PYTHONPATH and the venv
            stdout=log,
            stderr=subprocess.STDOUT,
            env=environ,
            start_new_session=True,
        )
        try:
            returncode = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            stop_process_group(proc, STOP_GRACE_S)
            returncode = proc.returncode if proc.returncode not in (0, None) else -1
        except BaseException:
            stop_process_group(proc, STOP_GRACE_S)
            raise
    finished = time.strftime("%Y-%m-%dT%H:%M:%S")
    record = RunRecord(shlex.join(spec.command), environ["PYTHONPATH"], returncode, time.monotonic() - start, finished)
    spec.done_path.write_text(json.dumps(asdict(record), indent=1) + "\n")
    return record
