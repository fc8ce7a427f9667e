"""Profilers that start the process (nsys, rocprof-sys): the command line that wraps it, and the in-process side
that opens and closes capture windows through the CUDA profiler API (honoured by nsys with
capture-range=cudaProfilerApi, and by rocprof-sys).

Option rendering follows RLinf: a one-letter key becomes `-k value`, a longer one `--key=value`, a flag `--flag`.
"""

from __future__ import annotations

from pathlib import Path

from sf.profiling.config import ProfilingConfig, binary_path

ROCPROF_DEFAULT_ENV = {"ROCPROFSYS_TIME_OUTPUT": "false"}


def render_options(options: dict[str, str]) -> list[str]:
    tokens: list[str] = []
    for key, value in options.items():
        tokens += [f"-{key}", value] if len(key) == 1 else [f"--{key}={value}"]
    return tokens


def render_flags(flags: tuple[str, ...]) -> list[str]:
    return [f"-{flag}" if len(flag) == 1 else f"--{flag}" for flag in flags]


def nsight_command(pcfg: ProfilingConfig, stem: Path) -> tuple[list[str], dict[str, str]]:
    """`nsys profile [flags] [options] -o <stem>`; with steps, capture-range keys the user did not set are added."""
    options = dict(pcfg.options)
    if pcfg.steps:
        options.setdefault("capture-range", "cudaProfilerApi")
        options.setdefault("capture-range-end", "stop")
    if "o" not in options and "output" not in options:
        options["o"] = str(stem)
    return [binary_path("nsight"), "profile", *render_flags(pcfg.flags), *render_options(options)], dict(pcfg.env)


def rocprof_sys_command(pcfg: ProfilingConfig, stem: Path) -> tuple[list[str], dict[str, str]]:
    """`rocprof-sys-python [args] --`; the output folder and prefix go through the environment, the user's env wins."""
    env = {
        **ROCPROF_DEFAULT_ENV,
        "ROCPROFSYS_OUTPUT_PATH": str(stem.parent),
        "ROCPROFSYS_OUTPUT_PREFIX": f"{stem.name}.",
        **pcfg.env,
    }
    return [binary_path("rocprof_sys"), *render_options(pcfg.args), "--"], env


class CudaProfilerApiBackend:
    """Opens the capture window of the profiler that wraps this process. Without CUDA there is no window to open:
    the wrapper then records the whole process."""

    warmup_steps = 0
    ranges = True

    def __init__(self, pcfg: ProfilingConfig, stem: Path, warmup: int = 0, active: int = 0):
        import torch

        self.cuda = torch.cuda.is_available()
        self.stem = stem

    def start(self) -> None:
        if self.cuda:
            import torch

            torch.cuda.profiler.start()

    def step(self) -> None:
        pass

    def stop(self) -> None:
        if self.cuda:
            import torch

            torch.cuda.synchronize()
            torch.cuda.profiler.stop()

    def outputs(self) -> list[Path]:
        return []
