"""GPU utilization as NVML (and so `nvidia-smi`) reports it, sampled over the capture window.

NVML's figure is the share of its last sample period in which any kernel ran, so a GPU running one tiny kernel
per period reads as busy. Putting it beside the kernel-busy time the profiler measures shows how far apart the
two are. `nvidia-ml-py` is an optional import: without it, or without a GPU, there is simply no NVML column.
"""

from __future__ import annotations

import threading
import time


class NvmlSampler:
    """Polls the utilization of one GPU on a thread; `samples` are (time ns, utilization 0..1)."""

    def __init__(self, device_index: int = 0, period_s: float = 0.05):
        import pynvml  # from nvidia-ml-py

        self._nvml = pynvml
        pynvml.nvmlInit()
        self._handle = pynvml.nvmlDeviceGetHandleByIndex(device_index)
        self.period_s = period_s
        self.samples: list[tuple[int, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _poll(self) -> None:
        while not self._stop.wait(self.period_s):
            self._sample()

    def _sample(self) -> None:
        rates = self._nvml.nvmlDeviceGetUtilizationRates(self._handle)
        self.samples.append((time.time_ns(), rates.gpu / 100.0))

    def start(self) -> None:
        self._thread = threading.Thread(target=self._poll, name="nvml-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()  # the period that ends with the window
        self._nvml.nvmlShutdown()


def open_sampler() -> NvmlSampler | None:
    """A sampler for the GPU training uses, or None where there is no CUDA device or no nvidia-ml-py."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        return NvmlSampler(torch.cuda.current_device())
    except Exception:  # no pynvml, no driver library: the breakdown goes on without the NVML column
        return None


def driver_version() -> str | None:
    """The NVIDIA driver's version as NVML reports it, or None without a driver or nvidia-ml-py."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no pynvml, no driver library, no GPU
        return None
    return version.decode() if isinstance(version, bytes) else version
