"""CPU, memory and GPU of a component's process: wall lifetime, CPU user/system seconds, peak RSS, and on CUDA
the peak GPU memory and the GPU-busy seconds of the scopes that launch kernels.

Wall-clock scopes lie on a GPU: a kernel launch returns at once and its cost lands in whichever later scope
waits for it (usually a copy to the CPU). GPU-busy seconds therefore come from CUDA events recorded around the
kernel-launching scopes (forward passes, the backward pass and optimizer step of `update`, the batch preparation)
and read back lazily, without stalling the stream. `--profiling_cuda_sync=True` goes further and synchronizes at
the end of every scope, charging the wait to the scope that launched the work (slower, for attribution only).
"""

from __future__ import annotations

import resource
import sys
import time
from dataclasses import asdict, dataclass

import psutil

from sf.utils.timing import ScopeHook, add_scope_hook

# Scopes (last key of the path) whose kernels are timed with CUDA events; the outermost one open wins.
GPU_SCOPES = frozenset(
    {"forward", "calculate_losses", "update", "backward", "optimizer_step", "prepare_batch", "obs_to_device_normalize"}
)

_process: psutil.Process | None = None
_gpu: GpuMeter | None = None


@dataclass
class Resources:
    """One process's use of the machine so far (the contract's `resources` entry of profile.json)."""

    wall_s: float
    cpu_user_s: float
    cpu_system_s: float
    peak_rss_bytes: int
    gpu_peak_mem_bytes: int | None = None
    gpu_busy_s: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def snapshot() -> Resources:
    """This process's resources since it started (CPU of its own threads, not of its children)."""
    global _process
    if _process is None:
        _process = psutil.Process()
    cpu = _process.cpu_times()
    gpu_mem, gpu_busy = (_gpu.peak_memory(), _gpu.busy_s()) if _gpu is not None else (None, None)
    return Resources(
        wall_s=time.time() - _process.create_time(),
        cpu_user_s=cpu.user,
        cpu_system_s=cpu.system,
        peak_rss_bytes=_peak_rss(),
        gpu_peak_mem_bytes=gpu_mem,
        gpu_busy_s=gpu_busy,
    )


def _peak_rss() -> int:
    """Peak resident memory of this process. On Linux from VmHWM, which starts afresh at exec: getrusage's
    maximum survives exec and would report the parent's peak for a spawned process."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) * (1 if sys.platform == "darwin" else 1024)  # kilobytes on Linux, bytes on macOS


class GpuMeter:
    """CUDA events around the kernel-launching scopes of one process, summed once they have completed."""

    def __init__(self, device: str, sync: bool):
        import torch

        self.torch = torch
        self.device = torch.device(device)
        self.sync = sync
        self.open = 0  # depth of nested GPU scopes; events only around the outermost
        self.pending: list[tuple] = []
        self.done_s = 0.0
        self.is_gpu: dict[str, bool] = {}
        self.hook = ScopeHook(self._enter, self._exit)

    def _gpu_scope(self, path: str) -> bool:
        flag = self.is_gpu.get(path)
        if flag is None:
            flag = self.is_gpu[path] = path.rsplit("/", 1)[-1] in GPU_SCOPES
        return flag

    def _enter(self, node) -> None:
        if self._gpu_scope(node.path):
            if self.open == 0:
                start = self.torch.cuda.Event(enable_timing=True)
                start.record()
                self.pending.append((start, None))
            self.open += 1

    def _exit(self, node) -> None:
        if self.sync:
            began = time.perf_counter()
            self.torch.cuda.synchronize(self.device)
            node.time += time.perf_counter() - began  # the wait belongs to the scope that launched the work
        if self._gpu_scope(node.path):
            self.open -= 1
            if self.open == 0:
                end = self.torch.cuda.Event(enable_timing=True)
                end.record()
                self.pending[-1] = (self.pending[-1][0], end)
                if len(self.pending) > 256:
                    self._collect(wait=False)

    def _collect(self, wait: bool) -> None:
        keep = []
        for start, end in self.pending:
            if end is None or not (wait or end.query()):
                keep.append((start, end))
                continue
            end.synchronize()
            self.done_s += start.elapsed_time(end) / 1000.0
        self.pending = keep

    def busy_s(self) -> float:
        self._collect(wait=True)
        return self.done_s

    def peak_memory(self) -> int:
        return int(self.torch.cuda.max_memory_allocated(self.device))


def start_gpu_meter(device: str, sync: bool) -> GpuMeter | None:
    """In a process that runs models on CUDA: time its kernel-launching scopes with CUDA events."""
    global _gpu
    if not device.startswith("cuda"):
        return None
    if _gpu is None:
        _gpu = GpuMeter(device, sync)
        add_scope_hook(_gpu.hook)
    return _gpu


def format_bytes(count: int) -> str:
    gib = count / 2**30
    return f"{gib:.1f} GiB" if gib >= 1 else f"{count / 2**20:.0f} MiB"


def header(name: str, res: dict, activity: dict | None = None) -> str:
    """`Learner 0: cpu 85.1 s of 120.3 s, rss 1.2 GiB`, then GPU figures on CUDA and the work/wait split."""
    line = (
        f"{name}: cpu {res['cpu_user_s'] + res['cpu_system_s']:.1f} s of {res['wall_s']:.1f} s, "
        f"rss {format_bytes(res['peak_rss_bytes'])}"
    )
    if res.get("gpu_peak_mem_bytes") is not None:
        line += f", gpu memory {format_bytes(res['gpu_peak_mem_bytes'])}, gpu busy {res['gpu_busy_s']:.1f} s"
    if activity and activity["lifetime_s"] > 0:
        share = {key: 100 * activity[f"{key}_s"] / activity["lifetime_s"] for key in ("work", "wait", "overhead")}
        line += f"; work {share['work']:.0f} %, wait {share['wait']:.0f} %, loop {share['overhead']:.0f} %"
    return line
