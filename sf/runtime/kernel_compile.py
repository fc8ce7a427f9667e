"""Every numba kernel a run calls, compiled (or loaded from numba's cache) before the run's clock starts.

numba compiles a kernel on its first call and caches the machine code (`*.nbi` and `*.nbc` files in the
`__pycache__` folder beside each module, or under `$NUMBA_CACHE_DIR` when it is set); later runs load it in well under
a second. The first run after an install or a change of the kernels' code compiles them: 10-15 s on a busy 2-core
machine, most of it the MLP policy's inference step. Left to the first call, that time fell inside the run: a first run
reported a quarter of the frame rate of the next one, and its components' loops seemed to start late. Compiled here,
in the main process before the runner starts its clock, it counts as neither; and one line says what is happening
while it happens (numba's compile event fires on a cache miss only, so a warm run prints nothing).
"""

from __future__ import annotations

import logging
import os

import torch
from numba.core import event

from sf.algo.discounted_scan import reverse_discounted_scan
from sf.algo.gae import compute_gae
from sf.model.activations import MIN_ELEMENTS, Activation
from sf.model.mlp_kernel import seed_sampling
from sf.model.pixel_kernels import uint8_moments
from sf.runtime.buffers import TrajectoryBuffers
from sf.runtime.inference_worker import compile_policy_kernel

log = logging.getLogger("sf")

COMPILE_EVENT = "numba:compile"


def compiling_line() -> str:
    where = f"$NUMBA_CACHE_DIR ({os.environ['NUMBA_CACHE_DIR']})" if os.environ.get("NUMBA_CACHE_DIR") else None
    where = where or "__pycache__ beside each module"
    return (
        "compiling numba kernels (first use only, 10-20 s on 2 cores, outside the run's clock); numba caches them in "
        f"{where} for later runs"
    )


class FirstCompileLine(event.Listener):
    """Logs `compiling_line()` when numba first compiles in this process, and nothing on a cache hit."""

    def __init__(self):
        self.said = False

    def on_start(self, ev: event.Event) -> None:
        if not self.said:
            self.said = True
            log.info("%s", compiling_line())

    def on_end(self, ev: event.Event) -> None:
        pass


_listener: FirstCompileLine | None = None


def announce_compiles() -> FirstCompileLine:
    """From now on, the first compile in this process says so (once per process)."""
    global _listener
    if _listener is None:
        _listener = FirstCompileLine()
        event.register(COMPILE_EVENT, _listener)
    return _listener


def compile_kernels(cfg, model: torch.nn.Module, buffers: TrajectoryBuffers, device: str) -> None:
    """Compile or load each kernel the components will call, with the argument types they pass: the MLP policy's
    inference step (`--mlp_inference_kernel`), its sampling seed, GAE and the discounted scan of V-trace, the model's
    activations, and with image observations the pixel normalizer."""
    announce_compiles()
    compile_policy_kernel(cfg, model, buffers, device)
    seed_sampling(0)  # each process seeds its own stream when its inference worker starts
    rows = torch.zeros(2, 3)
    compute_gae(rows, rows, torch.zeros(2, 4), 0.99, 0.95, torch.ones(2, 4))
    reverse_discounted_scan(rows, rows)
    for kind in sorted({m.kind for m in model.modules() if isinstance(m, Activation)}):
        y = Activation(kind)(torch.zeros(MIN_ELEMENTS, requires_grad=True))
        y.backward(torch.ones_like(y))  # a dense gradient, as a layer's: the backward kernel takes no other
    normalizer = getattr(model, "obs_normalizer", None)
    for key, (shape, _) in buffers.layout.obs_spec.items():
        if normalizer is not None and key in normalizer.uint8_keys and len(shape) == 3:
            image = torch.zeros((1, *shape), dtype=torch.uint8)
            uint8_moments(image)
            with torch.no_grad():
                normalizer({key: image})
