"""`--precision`: the arithmetic of the image encoder, the one part of the network whose cost grows with the pixels.

bf16 runs the encoder's convolutions and fully connected layers under autocast in bfloat16 (with float32
accumulation); the weights, the recurrent core, the heads, the losses and the optimizer stay float32, so action
probabilities, log-probabilities and values keep their full precision. On CPUs with AMX tiles, matrix units that
multiply bfloat16 only, it halves the Doom suite's learner step (0.69 -> 0.40 s for a 1,024-sample batch on one core);
elsewhere bfloat16 is emulated and slower than float32.

`auto` (the default) is float32 everywhere: bfloat16 is opt-in (`--precision=bf16`) until learning with it has been
shown to match float32 (doom_basic and doom_defend_the_center, three seeds each; `docs/performance.md`, section 13).
The request, not its resolution, travels with the config, so every process (and with `--backend=ray` every node)
resolves it on its own hardware; what a run used and why is logged once at its start and written to config.json
(`precision_in_use`) and summary.json (`precision`). A resumed run keeps the precision it started with unless
`--precision` is given, and logs a warning when it changes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import cache

import torch

NAMES = {"fp32": "float32", "bf16": "bfloat16"}


@cache
def amx_available() -> bool:
    """The CPU has AMX tiles and torch can use them (read once per process)."""
    supported = getattr(torch.cpu, "_is_amx_tile_supported", None)
    return bool(supported is not None and supported())


@cache
def resolve_precision(precision: str, device_type: str) -> str:
    """ "fp32" or "bf16" for `--precision` on a device of this type ("cpu", "cuda"): auto is fp32."""
    return "fp32" if precision == "auto" else precision


@dataclass(frozen=True)
class PrecisionChoice:
    """What `--precision` resolved to in this process, and why."""

    requested: str  # the flag's value: auto, fp32 or bf16
    used: str  # fp32 or bf16: the image encoder's arithmetic (float32 where the model has no image encoder)
    amx: bool  # this CPU has AMX tiles
    reason: str
    image_encoder: bool = True  # the model has a conv encoder (what the layout advice needs to know too)

    def to_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        return f"{NAMES[self.used]} ({self.reason})"


def choose_precision(requested: str, device_type: str, image_encoder: bool = True) -> PrecisionChoice:
    """The precision a process on this hardware uses for `requested`, with the reason in words."""
    amx = device_type == "cpu" and amx_available()
    hardware = f"{device_type} device" if device_type != "cpu" else ("AMX found" if amx else "no AMX")
    if not image_encoder:
        return PrecisionChoice(
            requested, "fp32", amx, "no image encoder: the network is float32 throughout", image_encoder=False
        )
    used = resolve_precision(requested, device_type)
    if requested == "auto":
        reason = f"auto; {hardware}; bfloat16 only with --precision=bf16"
    elif used == "bf16" and device_type == "cpu" and not amx:
        reason = "--precision=bf16; no AMX, so bfloat16 is emulated and slower than float32 here"
    else:
        reason = f"--precision={requested}; {hardware}"
    return PrecisionChoice(requested, used, amx, reason)
