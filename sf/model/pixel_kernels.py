"""numba kernels for uint8 image batches on the CPU, each one pass over the bytes.

Why they exist: at the learner's Doom batch (1024 x 3 x 72 x 128, one thread) torch needed about 350 ms to
convert to float and take the per-pixel `var_mean` over the batch, and about 280 ms to convert, standardize,
clip and lay the result out channels-last for the conv encoder. `uint8_moments` takes about 10 ms and
`uint8_affine_channels_last` about 35 ms for the same work (`benchmarks/bench_obs_normalizer.py`).
"""

from __future__ import annotations

import numba
import numpy as np
import torch


@numba.njit(cache=True)
def _moments_kernel(x: np.ndarray, sums: np.ndarray, sumsq: np.ndarray) -> None:
    """x [N, D] uint8; integer sums stay exact for any batch size."""
    for i in range(x.shape[0]):
        for d in range(x.shape[1]):
            v = np.int64(x[i, d])
            sums[d] += v
            sumsq[d] += v * v


@numba.njit(cache=True)
def _affine_kernel(
    x: np.ndarray, scale: np.ndarray, shift: np.ndarray, lo: np.float32, hi: np.float32, out: np.ndarray
) -> None:
    """out[n, h, w, c] = clip(x[n, c, h, w] * scale[h, w, c] + shift[h, w, c]); reads stay sequential."""
    n_rows, channels, height, width = x.shape
    for n in range(n_rows):
        for c in range(channels):
            for h in range(height):
                for w in range(width):
                    v = np.float32(x[n, c, h, w]) * scale[h, w, c] + shift[h, w, c]
                    out[n, h, w, c] = min(max(v, lo), hi)


def uint8_moments(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-element mean and (biased) variance over the first dimension of a uint8 CPU tensor, as float32."""
    flat = x.reshape(x.shape[0], -1).numpy()
    sums = np.zeros(flat.shape[1], dtype=np.int64)
    sumsq = np.zeros(flat.shape[1], dtype=np.int64)
    _moments_kernel(flat, sums, sumsq)
    mean = sums / flat.shape[0]
    var = np.maximum(sumsq / flat.shape[0] - mean * mean, 0.0)
    shape = x.shape[1:]
    return torch.from_numpy(mean.astype(np.float32)).view(shape), torch.from_numpy(var.astype(np.float32)).view(shape)


def hwc_array(per_pixel: torch.Tensor) -> np.ndarray:
    """A per-element [C, H, W] factor as the contiguous float32 [H, W, C] array the affine kernel reads."""
    return np.ascontiguousarray(per_pixel.detach().to(torch.float32).permute(1, 2, 0).numpy())


def uint8_affine_channels_last(
    x: torch.Tensor, scale_hwc: np.ndarray, shift_hwc: np.ndarray, clip: float | None
) -> torch.Tensor:
    """float32 `clip(x * scale + shift)` for uint8 images x [N, C, H, W] with per-element scale and shift
    (from `hwc_array`), returned in channels-last memory (the layout the conv encoder runs fastest on)."""
    n, c, h, w = x.shape
    out = torch.empty((n, c, h, w), dtype=torch.float32, memory_format=torch.channels_last)
    bound = np.float32(np.inf if clip is None else clip)
    _affine_kernel(x.numpy(), scale_hwc, shift_hwc, -bound, bound, out.permute(0, 2, 3, 1).numpy())
    return out
