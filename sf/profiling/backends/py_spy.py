"""py-spy: a sampler in its own process, attached to this one by pid, so the profiled code runs unmodified.

Two recorders run side by side: one writes `<stem>.speedscope.json` (speedscope.app), the other the SVG flame
graph `<stem>.svg`. They sample without pausing the process (--nonblocking). `stop()` sends them SIGINT, which
makes py-spy write its file, and waits; a recorder whose process dies writes its file on its own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from sf.profiling.config import ProfilingConfig, binary_path

RATE_HZ = 100
ATTACH_WAIT_S = 5.0
WRITE_WAIT_S = 60.0


class PySpyBackend:
    warmup_steps = 0
    ranges = False

    def __init__(self, pcfg: ProfilingConfig, stem: Path, warmup: int = 0, active: int = 0):
        self.speedscope = stem.with_name(stem.name + ".speedscope.json")
        self.svg = stem.with_name(stem.name + ".svg")
        self.log = stem.with_name(stem.name + ".py-spy.log")
        self.recorders: list[subprocess.Popen] = []

    def command(self, fmt: str, path: Path) -> list[str]:
        return [
            binary_path("py_spy"),
            "record",
            "--pid",
            str(os.getpid()),
            "--rate",
            str(RATE_HZ),
            "--nonblocking",
            "--format",
            fmt,
            "--output",
            str(path),
        ]

    def start(self) -> None:
        with open(self.log, "ab") as log:
            for fmt, path in (("speedscope", self.speedscope), ("flamegraph", self.svg)):
                # a session of its own: a Ctrl-C in the terminal reaches sf, which stops the recorders in order
                self.recorders.append(
                    subprocess.Popen(
                        self.command(fmt, path),
                        stdout=log,
                        stderr=log,
                        start_new_session=True,
                        preexec_fn=_unblock_stop_signals,
                    )
                )
        _wait_for_attach(self.log, len(self.recorders))

    def step(self) -> None:
        pass

    def stop(self) -> None:
        for proc in self.recorders:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for proc in self.recorders:
            try:
                proc.wait(timeout=WRITE_WAIT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.recorders = []

    def outputs(self) -> list[Path]:
        return [self.speedscope, self.svg]


def _unblock_stop_signals() -> None:
    """Component processes block SIGINT/SIGTERM (the runner stops them in order) and children inherit the mask;
    a recorder must see the SIGINT that tells it to write its file."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def _wait_for_attach(log: Path, recorders: int) -> None:
    """py-spy prints one line per recorder once it samples; what runs before that would go unrecorded."""
    deadline = time.monotonic() + ATTACH_WAIT_S
    while time.monotonic() < deadline:
        if log.exists() and log.read_text(errors="replace").count("Sampling process") >= recorders:
            return
        time.sleep(0.01)
