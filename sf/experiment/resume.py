"""What a resumed run resumes, decided in the main process before anything is written.

With `--restart_behavior=resume` in an existing experiment folder:
- each policy's checkpoint is the newest one that loads (`CheckpointManager.newest`, which warns about newer files
  it skips);
- the new configuration is compared with the saved `config.json` (one that cannot be read refuses the resume, exit
  status 2): a change to a flag that decides what a checkpoint
  holds (the model's parameters and buffers, the optimizer's state, the env's spaces) is refused, with every such
  difference listed (exit status 2, nothing written); other changes are logged, and the old `config.json` is kept
  beside the new one;
- a run whose checkpoints already hold `--train_for_env_steps` frames is finished: the entry point says so and
  writes nothing;
- once the run starts, the checkpoints newer than the one continued from are set aside (`set_aside_newer`).
The parallel placement loads the chosen weights into the policy stores before any process starts, so every rollout
worker acts with them from its first step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sf.cfg.arguments import cfg_to_dict
from sf.experiment.checkpoint import CheckpointManager, Loaded
from sf.experiment.config_file import UnreadableConfig, read_config
from sf.utils.errors import ConfigError

# flags that decide what a checkpoint holds: model shapes and buffers, optimizer state, the env's spaces
CHECKPOINT_FLAGS = (
    "env",
    "num_policies",
    "env_framestack",
    "obs_subtract_mean",
    "obs_scale",
    "normalize_input",
    "normalize_input_keys",
    "normalize_returns",
    "encoder_mlp_layers",
    "encoder_conv_architecture",
    "encoder_conv_mlp_layers",
    "use_rnn",
    "rnn_size",
    "rnn_num_layers",
    "rnn_type",
    "decoder_mlp_layers",
    "nonlinearity",
    "actor_critic_share_weights",
    "adaptive_stddev",
    "continuous_tanh_scale",
    "initial_stddev",
    "optimizer",
)
RESOLVED_AT_START = ("inference_placement", "precision")  # "auto" in a new config, made concrete in config.json
NOT_COMPARED = ("cli_args", "restart_behavior", "wandb_unique_id", "precision_in_use")


@dataclass
class ResumePoint:
    checkpoints: dict[int, Loaded] = field(default_factory=dict)  # policy -> the newest checkpoint that loads
    changed: dict[str, tuple] = field(default_factory=dict)  # flag -> (saved value, new value)

    def finished(self, cfg) -> bool:
        """Every policy's checkpoint already holds the frames this run is asked to train."""
        return len(self.checkpoints) == cfg.num_policies and all(
            loaded.state["env_steps"] >= cfg.train_for_env_steps for loaded in self.checkpoints.values()
        )

    def paths(self) -> dict[int, Path]:
        return {policy: loaded.path for policy, loaded in self.checkpoints.items()}

    def set_aside_newer(self, cfg) -> None:
        """As training starts: the checkpoints newer than the ones it continues from (a damaged newest, the periodic
        ones after a best) go into `superseded/`, so that this run's saves are the newest from its first one."""
        folder = Path(cfg.train_dir) / cfg.experiment
        for policy, loaded in self.checkpoints.items():
            CheckpointManager(folder, policy, cfg.keep_checkpoints).set_aside_newer(loaded.path)


def find_resume_point(cfg) -> ResumePoint | None:
    """None unless this run resumes an existing experiment folder. ConfigError (exit status 2) when the config
    changes what the checkpoints hold; CheckpointError when checkpoints exist and none of a policy's loads."""
    folder = Path(cfg.train_dir) / cfg.experiment
    if cfg.restart_behavior != "resume" or not folder.is_dir():
        return None
    point = ResumePoint()
    for policy in range(cfg.num_policies):
        loaded = CheckpointManager(folder, policy, cfg.keep_checkpoints).newest(cfg.load_checkpoint_kind)
        if loaded is not None:  # the learner loads the optimizer's state itself; the run keeps only the rest
            point.checkpoints[policy] = Loaded(loaded.path, {k: v for k, v in loaded.state.items() if k != "optimizer"})
    saved = _saved_config(folder)
    if saved is not None:
        point.changed = config_changes(saved, cfg_to_dict(cfg))
    refused = {key: values for key, values in point.changed.items() if key in CHECKPOINT_FLAGS}
    if refused and point.checkpoints:
        listed = "; ".join(f"--{key}: {_show(old)} -> {_show(new)}" for key, (old, new) in refused.items())
        raise ConfigError(
            f"--restart_behavior=resume: {folder} holds checkpoints of another model; changed: {listed}. "
            f"Resume with the saved values, or use --restart_behavior=restart or another --experiment",
            flag="--restart_behavior",
        )
    return point


def config_changes(saved: dict, new: dict) -> dict[str, tuple]:
    """flag -> (saved, new) for every flag whose value differs; flags sf resolves at start are compared only when the
    new config names a value, flags added to sf since the saved run only when they differ from nothing."""
    changes = {}
    for key, value in new.items():
        if key in NOT_COMPARED or key not in saved:
            continue
        if key in RESOLVED_AT_START and value == "auto":
            continue
        if saved[key] != value:
            changes[key] = (saved[key], value)
    return changes


def _saved_config(folder: Path) -> dict | None:
    """The saved config, None where there is none; a config that cannot be read refuses the resume: what the
    checkpoints hold could not be compared with what this run would build."""
    try:
        return read_config(folder)
    except UnreadableConfig as err:
        raise ConfigError(
            f"--restart_behavior=resume: {err}: the run it would resume is unknown. Repair or remove it, or use "
            f"--restart_behavior=restart or another --experiment",
            flag="--restart_behavior",
        ) from None


def _show(value) -> str:
    return " ".join(map(str, value)) if isinstance(value, list) else str(value)
