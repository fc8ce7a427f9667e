"""The reverse discounted scan that GAE and V-trace both end in, over [N, T] trajectories:

    out[:, t] = x[:, t] + c[:, t] * out[:, t + 1],   out[:, T] = 0

GAE scans TD errors with the discount gamma * lambda (cut at episode ends); V-trace scans its clipped TD errors with
the trace gamma * c_t. Two implementations of the one recurrence: a numba kernel over numpy views for CPU tensors
(one thread, it was faster than the torch loop at every shape of `benchmarks/bench_gae.py`), and a torch loop over T
(vectorized over N, one fused multiply-add per step) for tensors on an accelerator. `scan_kernel` is also called from
other numba kernels (GAE's, after its terms).
"""

from __future__ import annotations

import numba
import numpy as np
import torch


@numba.njit(cache=True, fastmath=False)
def scan_kernel(x: np.ndarray, c: np.ndarray, out: np.ndarray) -> None:
    n, t_len = x.shape
    for i in range(n):
        acc = 0.0
        for t in range(t_len - 1, -1, -1):
            acc = x[i, t] + c[i, t] * acc
            out[i, t] = acc


def as_float32(x: torch.Tensor) -> np.ndarray:
    return np.ascontiguousarray(x.detach().float().numpy(), dtype=np.float32)


def reverse_scan_numba(x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """CPU tensors only; read through numpy views (copied only if not contiguous float32)."""
    xs = as_float32(x)
    out = np.empty_like(xs)
    scan_kernel(xs, as_float32(c), out)
    return torch.from_numpy(out)


@torch.no_grad()
def reverse_scan_torch(x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """Any device: T fused multiply-adds over [N] columns."""
    x_tn, c_tn = x.t().contiguous(), c.t().contiguous()
    out_tn = torch.empty_like(x_tn)
    acc = torch.zeros_like(x_tn[0])
    for t in range(x_tn.shape[0] - 1, -1, -1):
        acc = torch.addcmul(x_tn[t], c_tn[t], acc, out=out_tn[t])
    return out_tn.t().contiguous()


def reverse_discounted_scan(x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """`out[:, t] = x[:, t] + c[:, t] * out[:, t + 1]` from the last step back, on x's device."""
    if x.device.type == "cpu":
        return reverse_scan_numba(x, c)
    return reverse_scan_torch(x, c)
