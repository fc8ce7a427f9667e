"""Observation preprocessing shared by inference and learning: float32 conversion, fixed scaling of uint8
keys, and optional running mean/std normalization whose statistics are checkpointed buffers.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from sf.algo.running_mean_std import RunningMeanStd
from sf.envs.spaces import ObsSpec
from sf.model.pixel_kernels import hwc_array, uint8_affine_channels_last, uint8_moments


def _module_name(key: str) -> str:
    """Nested obs keys ("a.b") cannot be module names as they are, nor keys that name a ModuleDict method ("items")."""
    name = key.replace(".", "__")
    return f"{name}_" if hasattr(nn.ModuleDict, name) else name


class ObsNormalizer(nn.Module):
    """uint8 keys: (x - obs_subtract_mean) / obs_scale; then, with `--normalize_input`, each selected key
    (all keys, or those named in `--normalize_input_keys`) is standardized per element and clipped to [-5, 5].
    """

    def __init__(self, obs_spec: ObsSpec, cfg):
        super().__init__()
        self.subtract_mean = float(cfg.obs_subtract_mean)
        self.inv_scale = 1.0 / float(cfg.obs_scale)
        self.uint8_keys = frozenset(k for k, (_, dtype) in obs_spec.items() if np.dtype(dtype) == np.uint8)
        keys = list(obs_spec) if cfg.normalize_input else []
        if cfg.normalize_input and cfg.normalize_input_keys is not None:
            unknown = [k for k in cfg.normalize_input_keys if k not in obs_spec]
            if unknown:
                raise ValueError(f"--normalize_input_keys names {unknown}, not observation keys ({list(obs_spec)})")
            keys = list(cfg.normalize_input_keys)
        self.stats = nn.ModuleDict({_module_name(k): RunningMeanStd(tuple(obs_spec[k][0])) for k in keys})
        self._stats_by_key = {k: self.stats[_module_name(k)] for k in keys}
        self._affine_cache: dict[str, tuple] = {}

    def update(self, obs: dict[str, torch.Tensor]) -> None:
        """Move the statistics with a batch without producing normalized copies (the learner's prepare step)."""
        for key, stats in self._stats_by_key.items():
            x = obs[key]
            if self._is_cpu_image(key, x):
                mean, var = uint8_moments(x)
                stats.merge((mean - self.subtract_mean) * self.inv_scale, var * self.inv_scale**2, x.shape[0])
            else:
                stats.update(self._scaled(key, x))

    def summaries(self) -> dict[str, float]:
        """`<key>_running_mean` and `<key>_running_std` of each normalized key (see `RunningMeanStd.summary`)."""
        return {name: v for key, stats in self._stats_by_key.items() for name, v in stats.summary(key).items()}

    def forward(self, obs: dict[str, torch.Tensor], update: bool = False) -> dict[str, torch.Tensor]:
        """float32 observations; the inputs are never modified in place, statistics move only if `update`."""
        if update:
            self.update(obs)
        return {key: self._normalize(key, x) for key, x in obs.items()}

    def _is_cpu_image(self, key: str, x: torch.Tensor) -> bool:
        """A batch the numba kernels take; not while traced (an ONNX export records torch's operators only)."""
        return key in self.uint8_keys and x.dim() == 4 and x.device.type == "cpu" and not torch.jit.is_tracing()

    def _normalize(self, key: str, x: torch.Tensor) -> torch.Tensor:
        stats = self._stats_by_key.get(key)
        if self._is_cpu_image(key, x):  # one fused pass: scale, standardize, clip, channels-last
            scale, shift = self._pixel_affine(key, stats, x.shape[1:])
            return uint8_affine_channels_last(x, scale, shift, stats.clip if stats is not None else None)
        x = self._scaled(key, x)
        return stats.normalize(x) if stats is not None else x

    def _pixel_affine(self, key: str, stats: RunningMeanStd | None, shape: torch.Size) -> tuple[np.ndarray, np.ndarray]:
        """Per-pixel scale and shift that fold the fixed scaling and the running statistics into one multiply-add.

        Cached until the statistics change: every in-place write to them (an update, a load of new weights)
        bumps the tensors' version counters.
        """
        versions = (stats.mean._version, stats.var._version) if stats is not None else ()
        cached = self._affine_cache.get(key)
        if cached is not None and cached[0] == versions:
            return cached[1], cached[2]
        scale = torch.full(shape, self.inv_scale)
        shift = torch.full(shape, -self.subtract_mean * self.inv_scale)
        if stats is not None:
            inv_std = torch.rsqrt(stats.var + stats.epsilon)
            scale, shift = scale * inv_std, (shift - stats.mean) * inv_std
        scale_hwc, shift_hwc = hwc_array(scale), hwc_array(shift)
        self._affine_cache[key] = (versions, scale_hwc, shift_hwc)
        return scale_hwc, shift_hwc

    def _scaled(self, key: str, x: torch.Tensor) -> torch.Tensor:
        # batched images come out channels-last in the same copy, the layout the conv encoder runs fastest on
        layout = torch.channels_last if x.dim() == 4 else torch.contiguous_format
        x = x.to(torch.float32, memory_format=layout)
        if key in self.uint8_keys:  # x is a fresh copy here, so in-place scaling touches no caller's memory
            if self.subtract_mean != 0.0:
                x.sub_(self.subtract_mean)
            if self.inv_scale != 1.0:
                x.mul_(self.inv_scale)
        return x
