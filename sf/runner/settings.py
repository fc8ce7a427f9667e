"""What a run resolves once, at its start, from the flags and the machine: the device, the precision in use and
where inference runs. The config (`cfg`) stays as given for the whole run; components that need a resolved value take
it from `RunSettings`, and config.json records both (`sf.experiment.config_file`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

from sf.cfg.arguments import describe_device, resolve_device
from sf.envs.spaces import EnvInfo
from sf.model.precision import PrecisionChoice
from sf.runner.build import build_model, has_image_encoder, precision_choice, resolve_inference_placement

log = logging.getLogger("sf")


@dataclass(frozen=True)
class RunSettings:
    device: str  # "cpu" or "cuda": where the learner and inference run
    precision: PrecisionChoice  # the image encoder's arithmetic and why
    inference_placement: str  # "rollout_worker" or "own_process" in a parallel run; the flag's value in a serial one

    @property
    def colocated(self) -> bool:
        """Inference in each rollout worker's process (no inference processes)."""
        return self.inference_placement == "rollout_worker"

    def config_entries(self) -> dict[str, Any]:
        """What config.json records of these on top of the flags."""
        return {"inference_placement": self.inference_placement, "precision_in_use": self.precision.to_dict()}


def resolve_settings(cfg, env_info: EnvInfo, previous_precision: str | None = None) -> RunSettings:
    """Say once what the run uses and why. `previous_precision`: what a resumed run used (`restored_precision`)."""
    device = resolve_device(cfg)
    log.info("learner and inference on %s", describe_device(device))
    choice = precision_choice(cfg, env_info, device)
    if previous_precision is not None and has_image_encoder(env_info):
        if previous_precision != choice.used:
            log.warning(
                "precision changed on resume: the run started in %s and continues in %s",
                previous_precision,
                choice.used,
            )
        else:
            choice = replace(choice, reason=f"{choice.reason}; as the run being resumed")
    log.info("precision: %s", choice.describe())
    placement = cfg.inference_placement
    if not cfg.serial_mode:
        placement = resolve_inference_placement(cfg, device, build_model(cfg, env_info, "cpu"))
        log.info(
            "policy inference %s",
            "in each rollout worker's process"
            if placement == "rollout_worker"
            else f"in {cfg.policy_workers_per_policy} process(es) per policy",
        )
    return RunSettings(device, choice, placement)
