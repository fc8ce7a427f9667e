"""Sample Factory flags that sf keeps only so that Sample Factory command lines run unchanged.

Each one is accepted with the single value that describes what sf does; any other value fails at parse time
with one line that says why and what to use instead. A flag listed here must not be read anywhere else
(tests/test_flags_used.py checks that every parser flag is either read by the code or listed here).
"""

from __future__ import annotations

from argparse import Namespace
from dataclasses import dataclass
from typing import Any

from sf.utils.errors import ConfigError


@dataclass(frozen=True)
class Unsupported:
    accepted: Any  # the only value sf honours: what sf always does
    instead: str  # why other values cannot work, and what to use instead


UNSUPPORTED: dict[str, Unsupported] = {
    "algo": Unsupported("APPO", "sf implements APPO only; leave --algo out"),
    "optimizer": Unsupported("adam", "sf trains with Adam only (tune it with --adam_eps, --adam_beta1, --adam_beta2)"),
    "actor_worker_gpus": Unsupported([], "sf's rollout workers run their envs on the CPU; leave the list empty"),
    "use_env_info_cache": Unsupported(
        False, "sf probes the env's spaces once per run in the main process; leave it False"
    ),
    "pixel_format": Unsupported("CHW", "sf's conv encoders always take channels first (CHW)"),
    "summaries_use_frameskip": Unsupported(
        True, "the x axis of sf's summaries always counts env frames after frameskip"
    ),
    "heartbeat_interval": Unsupported(
        20, "sf's components send a heartbeat every 0.5 s; set how long one may miss with --heartbeat_timeout_sec"
    ),
    "heartbeat_reporting_interval": Unsupported(
        180, "sf names a component that misses its heartbeats in the error that ends the run; leave it out"
    ),
    "no_render": Unsupported(True, "sf's evaluation never opens a window; use --save_video to watch the episodes"),
}


def reject_unsupported(cfg: Namespace) -> None:
    """Raise ConfigError for the first listed flag whose value is not the one sf honours."""
    for name, entry in UNSUPPORTED.items():
        if hasattr(cfg, name) and getattr(cfg, name) != entry.accepted:
            raise ConfigError(f"--{name}={getattr(cfg, name)} is not supported: {entry.instead}", flag=f"--{name}")
