"""Observation preprocessing shared by inference and learning: float32 conversion, fixed scaling of uint8
keys, and optional running mean/std normalization whose statistics are checkpointed buffers.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from sf.algo.running_mean_std import RunningMeanStd
from sf.envs.spaces import ObsSpec


def _module_name(key: str) -> str:
    return key.replace(".", "__")  # nested obs keys ("a.b") cannot be module names as they are


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

    def update(self, obs: dict[str, torch.Tensor]) -> None:
        """Move the statistics with a batch without producing normalized copies (the learner's prepare step)."""
        for key, stats in self._stats_by_key.items():
            stats.update(self._scaled(key, obs[key]))

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

    def forward(self, obs: dict[str, torch.Tensor], update: bool = False) -> dict[str, torch.Tensor]:
        """float32 observations; the inputs are never modified in place, statistics move only if `update`."""
        out = {}
        for key, x in obs.items():
            x = self._scaled(key, x)
            stats = self._stats_by_key.get(key)
            if stats is not None:
                if update:
                    stats.update(x)
                x = stats.normalize(x)
            out[key] = x
        return out
