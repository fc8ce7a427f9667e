"""`--precision`: the arithmetic of the image encoder, the one part of the network whose cost grows with the pixels.

bf16 runs the encoder's convolutions and fully connected layers under autocast in bfloat16 (with float32
accumulation); the weights, the recurrent core, the heads, the losses and the optimizer stay float32, so action
probabilities, log-probabilities and values keep their full precision. `auto` picks bf16 where it was measured to pay:
CPUs with AMX tiles, matrix units that multiply bfloat16 only (the Doom suite's encoder, forward and backward on a
1,024-sample batch: 0.69 -> 0.40 s per learner step on one core). Elsewhere (other CPUs, CUDA) `auto` is fp32.
"""

from __future__ import annotations

from functools import cache

import torch


@cache
def amx_available() -> bool:
    """The CPU has AMX tiles and torch can use them (read once per process)."""
    supported = getattr(torch.cpu, "_is_amx_tile_supported", None)
    return bool(supported is not None and supported())


@cache
def resolve_precision(precision: str, device_type: str) -> str:
    """ "fp32" or "bf16" for `--precision` on a device of this type ("cpu", "cuda")."""
    if precision != "auto":
        return precision
    return "bf16" if device_type == "cpu" and amx_available() else "fp32"
