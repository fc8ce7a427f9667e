"""Weights & Biases logging for `--with_wandb`: the same scalars as TensorBoard, and the config.

The run's id is `<experiment>_<timestamp>`, kept in config.json (`wandb_unique_id`), so a resumed experiment
continues its W&B run as in Sample Factory. The run's files go under the experiment folder (`wandb/`).
Scalars are logged with `env_frames` as their x axis; with several policies each key gets a `p<i>/` prefix.
"""

from __future__ import annotations

import logging
import sys
from datetime import datetime
from pathlib import Path

from sf.cfg.arguments import cfg_to_dict
from sf.experiment.config_file import read_config_or_empty

log = logging.getLogger("sf")

STEP_KEY = "env_frames"


def wandb_run_id(cfg, experiment_dir: Path) -> str:
    """The id saved with the experiment when it is resumed, else a new one."""
    if cfg.restart_behavior == "resume":
        previous = read_config_or_empty(experiment_dir).get("wandb_unique_id")
        if previous:
            return previous
    return f"{cfg.experiment}_{datetime.now().strftime('%Y%m%d_%H%M%S_%f')}"


class WandbLogger:
    def __init__(self, cfg, experiment_dir: Path):
        try:
            import wandb
        except ImportError:
            raise RuntimeError("--with_wandb=True needs the wandb package: pip install 'sf[wandb]'") from None
        self.prefix = cfg.num_policies > 1
        cfg.wandb_unique_id = wandb_run_id(cfg, experiment_dir)
        try:
            self.run = wandb.init(
                project=cfg.wandb_project,
                entity=cfg.wandb_user,
                group=cfg.wandb_group or cfg.env,
                job_type=cfg.wandb_job_type,
                tags=cfg.wandb_tags,
                id=cfg.wandb_unique_id,
                name=cfg.wandb_unique_id,
                resume="allow",
                dir=str(experiment_dir),
                config=cfg_to_dict(cfg),
            )
        except Exception as err:  # no login, no network: say so before anything starts
            first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            print(
                f"sf: error: --with_wandb: cannot start a W&B run ({first_line}); run `wandb login`, "
                "or set WANDB_MODE=offline and upload later with `wandb sync`",
                file=sys.stderr,
            )
            sys.exit(2)
        self.run.define_metric(STEP_KEY)
        self.run.define_metric("*", step_metric=STEP_KEY)
        log.info("logging to Weights & Biases: project %s, run %s", cfg.wandb_project, cfg.wandb_unique_id)

    def log(self, policy_id: int, step: int, scalars: dict[str, float]) -> None:
        prefix = f"p{policy_id}/" if self.prefix else ""
        self.run.log({**{prefix + key: value for key, value in scalars.items()}, STEP_KEY: step})

    def finish(self) -> None:
        self.run.finish()
