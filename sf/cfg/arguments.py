"""Command-line flags (Sample Factory names), YAML presets and their resolution into one config namespace.

Precedence, lowest first: parser defaults < the example script's `defaults` < the `--cfg` YAML file <
the command line. Every layer goes through the same value parsers, so a bad value fails the same way
wherever it was written, with a message that names the flag.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import yaml

from sf.cfg.unsupported import UNSUPPORTED, reject_unsupported
from sf.cfg.validate import validate_cfg
from sf.profiling.backends.catalog import BACKEND_NAMES, MAIN_THREAD_PROFILERS
from sf.profiling.config import flatten_yaml_section, profiling_config
from sf.utils.errors import ConfigError, error_line

log = logging.getLogger("sf")

PRESETS_DIR = Path(__file__).resolve().parents[2] / "configs"

AddArgs = Callable[[argparse.ArgumentParser], None]
Defaults = dict[str, Any] | Callable[[str], dict[str, Any]]

_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no"}


# --- value parsers: argparse reports ArgumentTypeError messages verbatim -----------------------------


def str2bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"expected a boolean (True/False), got {value!r}")


def _to_int(value: str) -> int:
    """Integers, also written as integral floats ("1e9"), since step counts are often given that way."""
    try:
        return int(value)
    except ValueError:
        pass
    try:
        number = float(value)
    except ValueError:
        number = None
    if number is not None and number.is_integer():
        return int(number)
    raise argparse.ArgumentTypeError(f"expected an integer, got {value!r}")


def _to_float(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a float, got {value!r}") from None


def _one_of(*options: str) -> Callable[[str], str]:
    def parse(value: str) -> str:
        if value not in options:
            raise argparse.ArgumentTypeError(f"invalid choice {value!r} (choose from {', '.join(options)})")
        return value

    return parse


# --- parser ------------------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """Raises ConfigError instead of printing and exiting, so library callers and tests can catch it."""

    def error(self, message: str):
        raise ConfigError(message)


class _Group:
    """Adds flags of one kind each with one call, keeping the flag table below readable."""

    def __init__(self, parser: argparse.ArgumentParser, title: str):
        self.group = parser.add_argument_group(title)

    def boolean(self, name: str, default: bool, help: str) -> None:
        self.group.add_argument(
            f"--{name}", type=str2bool, nargs="?", const=True, default=default, metavar="BOOL", help=help
        )

    def integer(self, name: str, default: int | None, help: str) -> None:
        self.group.add_argument(f"--{name}", type=_to_int, default=default, metavar="INT", help=help)

    def real(self, name: str, default: float, help: str) -> None:
        self.group.add_argument(f"--{name}", type=_to_float, default=default, metavar="FLOAT", help=help)

    def text(self, name: str, default: str | None, help: str) -> None:
        self.group.add_argument(f"--{name}", type=str, default=default, metavar="STR", help=help)

    def choice(self, name: str, options: tuple[str, ...], default: str, help: str) -> None:
        self.group.add_argument(
            f"--{name}", type=_one_of(*options), default=default, metavar="{" + ",".join(options) + "}", help=help
        )

    def int_list(self, name: str, default: list[int], help: str) -> None:
        self.group.add_argument(f"--{name}", type=_to_int, nargs="*", default=default, metavar="INT", help=help)

    def str_list(self, name: str, default: list[str] | None, help: str) -> None:
        self.group.add_argument(f"--{name}", type=str, nargs="*", default=default, metavar="STR", help=help)


def _only(name: str) -> str:
    """Help text of a flag kept for Sample Factory command lines: the one value sf accepts, and why."""
    accepted = UNSUPPORTED[name].accepted
    shown = {"None": "unset", "[]": "empty"}.get(str(accepted), str(accepted))
    return f"accepted only {shown}: {UNSUPPORTED[name].instead}"


def make_parser(add_args: AddArgs | None = None, evaluation: bool = False) -> argparse.ArgumentParser:
    """All sf flags; `add_args` lets an example add its env's flags, `evaluation` adds the enjoy flags."""
    parser = _Parser(
        description="sf: APPO training that measures itself.",
        allow_abbrev=False,
        exit_on_error=False,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    _experiment_flags(_Group(parser, "experiment"))
    _placement_flags(_Group(parser, "placement and sampling"))
    _batching_flags(_Group(parser, "rollouts and batches"))
    _rl_flags(_Group(parser, "returns and losses"))
    _optimizer_flags(_Group(parser, "optimizer"))
    _model_flags(_Group(parser, "model"))
    _env_flags(_Group(parser, "environment"))
    _run_flags(_Group(parser, "stopping, checkpoints and reporting"))
    _pbt_flags(_Group(parser, "population-based training"))
    _cluster_flags(_Group(parser, "cluster (Ray)"))
    _wandb_flags(_Group(parser, "Weights & Biases"))
    _profiling_flags(_Group(parser, "profiling"))
    if evaluation:
        _evaluation_flags(_Group(parser, "evaluation"))
    if add_args is not None:
        add_args(parser)
    return parser


def _experiment_flags(g: _Group) -> None:
    g.text("algo", "APPO", _only("algo"))
    g.text("env", None, "environment name (required): a registered sf env or a gymnasium id")
    g.text("experiment", "default_experiment", "experiment name: outputs go to <train_dir>/<experiment>/")
    g.text("train_dir", "./train_dir", "root folder for all experiments")
    g.choice(
        "restart_behavior",
        ("resume", "restart", "overwrite"),
        "resume",
        "what to do when the experiment folder exists: continue from its checkpoint, start over in it, "
        "or delete it first",
    )
    g.choice(
        "device",
        ("cpu", "gpu", "auto"),
        "gpu",
        "where the learner and inference run; gpu and auto use CUDA when there is one, else the CPU",
    )
    g.integer("seed", None, "random seed for envs and torch; unset means a different run every time")
    g.text(
        "cfg", None, "YAML file (or preset name in configs/) whose keys are flag names; the command line overrides it"
    )
    g.choice("log_level", ("debug", "info", "warning"), "info", "verbosity of the sf logger")
    g.boolean("log_to_file", True, "also write the log to <train_dir>/<experiment>/sf_log.txt")


def _placement_flags(g: _Group) -> None:
    g.integer("num_policies", 1, "number of policies trained side by side (each with its own learner)")
    g.boolean(
        "async_rl",
        True,
        "let collection run ahead of training, bounded by --max_policy_lag; "
        "False trains only on the current policy's experience",
    )
    g.boolean(
        "serial_mode",
        False,
        "run every component in the main process on one event loop "
        "(profilers see everything); implies --async_rl=False",
    )
    g.boolean(
        "batched_sampling",
        False,
        "each env object steps many copies in one call and returns tensors (IsaacGym / Isaac Lab style torch envs, "
        "Brax, gymnasium's vector API, EnvPool): a rollout worker steps its env objects, moves observations, "
        "actions and rewards as whole tensors and keeps episode statistics vectorized; each worker collects for "
        "one policy (worker index modulo --num_policies), as in Sample Factory",
    )
    g.integer("num_batches_to_accumulate", 2, "training batches the batcher may have ready ahead of the learner")
    g.integer(
        "worker_num_splits",
        2,
        "groups each worker's envs are split into, so one group steps while the "
        "other waits for actions (double buffering)",
    )
    g.integer("policy_workers_per_policy", 1, "inference worker processes per policy")
    g.choice(
        "inference_placement",
        ("auto", "own_process", "rollout_worker"),
        "auto",
        "where a parallel run's policy forward passes run: own_process (--policy_workers_per_policy processes "
        "per policy serve every rollout worker, batching their requests) or rollout_worker (each rollout worker "
        "process runs its own, no messages or process switches per step). auto: rollout_worker on the CPU with "
        "a model under 1M parameters and --policy_workers_per_policy not raised, own_process otherwise",
    )
    g.boolean(
        "mlp_inference_kernel",
        True,
        "on the CPU, run the inference step of an MLP policy over one vector observation without a recurrent core "
        "(classic control, MuJoCo) as one numba kernel instead of some forty torch operators; other models always "
        "use torch",
    )
    g.integer(
        "max_policy_lag",
        1000,
        "experience collected by a policy this many versions older than the learner's "
        "is dropped on arrival and masked out of the loss at training time",
    )
    g.integer("num_workers", os.cpu_count() or 1, "rollout worker processes (default: number of CPU cores)")
    g.integer("num_envs_per_worker", 2, "environments stepped by each rollout worker")
    g.integer(
        "env_threads",
        1,
        "threads each rollout worker steps its envs with (the worker's own thread among them). "
        "Pays where the env's step releases the GIL (MuJoCo's simulation does) and cores are free, as in a "
        "serial run on a multi-core machine; with more than 1, cProfile and yappi in their default mode see only "
        "the worker thread's share of the env steps. 0: automatic (the MuJoCo examples' default): every core in "
        "a serial run, 1 in a parallel run (its worker processes use the cores) and under a profiler that "
        "follows only the main thread (cProfile, pyinstrument, as the launcher or as --profiling_backend)",
    )
    g.integer(
        "decorrelate_experience_max_seconds",
        0,
        "rollout worker i waits i / num_workers times this many seconds before its first step, so "
        "workers do not deliver their trajectories in bursts",
    )
    g.boolean(
        "decorrelate_envs_on_one_worker",
        True,
        "at start, env i of a worker first takes i * --rollout random actions (not counted or trained on; "
        "modulo the env's time limit when it has one), so the envs of one worker do not reset in the same "
        "rollout",
    )
    g.boolean(
        "decorrelate_by_truncation",
        False,
        "with --decorrelate_envs_on_one_worker and an env with a time limit: instead of the random actions, "
        "truncate env i's first episode that many steps early (the same reset schedule, nothing simulated "
        "to get there; the MuJoCo examples' default, where each step is expensive)",
    )
    g.int_list("actor_worker_gpus", [], _only("actor_worker_gpus"))
    g.boolean("set_workers_cpu_affinity", True, "pin rollout worker i to the i-th allowed CPU core, round robin")
    g.boolean(
        "force_envs_single_thread",
        True,
        "start rollout worker processes with one thread per math library (OMP_NUM_THREADS and the like set to 1)",
    )
    g.integer(
        "default_niceness",
        0,
        "nice value of every component process of a parallel run "
        "(0: as launched; below the launching value needs privileges)",
    )
    g.boolean(
        "learner_priority",
        True,
        "run a parallel run's rollout and inference processes (and the env "
        "engines they start) 5 nice levels below the learner, so that on oversubscribed cores the learner, "
        "which no other process can help, gets a core first and collection takes what is left",
    )
    g.boolean(
        "keep_freed_memory",
        True,
        "keep memory freed by large tensors in each process's heap (glibc) "
        "instead of returning it to the OS, so the next step does not pay page faults to get it back",
    )


def _batching_flags(g: _Group) -> None:
    g.integer("batch_size", 1024, "samples per SGD minibatch")
    g.integer(
        "num_batches_per_epoch",
        1,
        "minibatches per training iteration; an iteration consumes batch_size * num_batches_per_epoch samples",
    )
    g.integer("num_epochs", 1, "passes of SGD over each iteration's samples")
    g.integer("rollout", 32, "env steps per trajectory sent from a worker to the learner")
    g.integer(
        "recurrence",
        -1,
        "length of the sequences the RNN is trained on (backprop through time); "
        "-1 means --rollout with an RNN and 1 without",
    )
    g.boolean("shuffle_minibatches", False, "shuffle samples (whole sequences with an RNN) between minibatches")


def _rl_flags(g: _Group) -> None:
    g.real("gamma", 0.99, "discount factor")
    g.real("reward_scale", 1.0, "multiply rewards by this before training")
    g.real("reward_clip", 1000.0, "clip scaled rewards to [-reward_clip, reward_clip]")
    g.boolean("value_bootstrap", False, "on time-limit truncation, bootstrap the return from the value estimate")
    g.boolean("normalize_returns", True, "train the value head on returns normalized by running statistics")
    g.real("gae_lambda", 0.95, "GAE lambda: 0 is one-step TD, 1 is Monte Carlo")
    g.real("exploration_loss_coeff", 0.003, "weight of the exploration term")
    g.real("value_loss_coeff", 0.5, "weight of the value loss")
    g.real(
        "kl_loss_coeff",
        0.0,
        "weight of a penalty on KL(current || behaviour policy), computed exactly from the "
        "behaviour policy's stored action logits (0 disables it)",
    )
    g.choice(
        "exploration_loss",
        ("entropy", "symmetric_kl"),
        "entropy",
        "exploration term: an entropy bonus, or a "
        "penalty on the symmetric KL to the uniform policy (categorical actions only)",
    )
    g.real("ppo_clip_ratio", 0.1, "PPO clips the probability ratio to [1 / (1 + r), 1 + r]")
    g.real("ppo_clip_value", 1.0, "clip value-function updates to this distance from the old values")
    g.boolean("with_vtrace", False, "correct off-policy experience with V-trace instead of plain GAE")
    g.real("vtrace_rho", 1.0, "V-trace truncation of importance weights for the value target")
    g.real("vtrace_c", 1.0, "V-trace truncation of the trace coefficients")


def _optimizer_flags(g: _Group) -> None:
    g.text("optimizer", "adam", _only("optimizer"))
    g.real("adam_eps", 1e-6, "Adam epsilon")
    g.real("adam_beta1", 0.9, "Adam beta1")
    g.real("adam_beta2", 0.999, "Adam beta2")
    g.real("max_grad_norm", 4.0, "clip the gradient norm to this (0 disables clipping)")
    g.real("learning_rate", 1e-4, "initial learning rate")
    g.choice(
        "lr_schedule",
        ("constant", "linear_decay", "kl_adaptive_minibatch", "kl_adaptive_epoch"),
        "constant",
        "learning-rate schedule; the kl_adaptive ones keep the policy KL near --lr_schedule_kl_threshold",
    )
    g.real("lr_schedule_kl_threshold", 0.008, "target KL divergence of the adaptive schedules")
    g.real("lr_adaptive_min", 1e-6, "lower bound of the adaptive learning rate")
    g.real("lr_adaptive_max", 1e-2, "upper bound of the adaptive learning rate")


def _model_flags(g: _Group) -> None:
    g.real("obs_subtract_mean", 0.0, "subtract this from observations (pixels) before --obs_scale")
    g.real("obs_scale", 1.0, "divide observations (pixels) by this")
    g.boolean("normalize_input", True, "normalize observations with running mean and std")
    g.str_list("normalize_input_keys", None, "observation keys to normalize (default: all)")
    g.int_list("encoder_mlp_layers", [512, 512], "hidden layer sizes of the MLP encoder for vector observations")
    g.choice(
        "encoder_conv_architecture",
        ("convnet_simple", "convnet_impala", "convnet_atari"),
        "convnet_simple",
        "convolutional encoder for pixel observations",
    )
    g.int_list("encoder_conv_mlp_layers", [512], "fully connected layers after the convolutions")
    g.boolean("use_rnn", True, "put a recurrent core between encoder and heads")
    g.integer("rnn_size", 512, "hidden state size of the recurrent core")
    g.integer("rnn_num_layers", 1, "stacked layers in the recurrent core")
    g.choice("rnn_type", ("gru", "lstm"), "gru", "recurrent cell")
    g.int_list("decoder_mlp_layers", [], "hidden layer sizes between the core and the heads")
    g.choice("nonlinearity", ("elu", "relu", "tanh"), "elu", "activation function")
    g.choice(
        "precision",
        ("auto", "fp32", "bf16"),
        "auto",
        "arithmetic of the image encoder: bf16 runs its convolutions and fully connected layers in bfloat16 "
        "(weights, recurrent core, heads and losses stay float32), about twice as fast on CPUs with AMX tiles and "
        "slower elsewhere; auto is fp32 on every machine until learning in bfloat16 is shown to match float32. "
        "A resumed run keeps the precision it started with unless this flag is given",
    )
    g.choice(
        "policy_initialization",
        ("orthogonal", "xavier_uniform", "torch_default"),
        "orthogonal",
        "weight initialization",
    )
    g.real("policy_init_gain", 1.0, "gain of the weight initialization")
    g.boolean(
        "init_all_layers",
        False,
        "apply --policy_initialization to every layer's weights; by default, as in "
        "Sample Factory, it reaches the action and value heads and the ResNet trunk, and MLP encoders, plain "
        "conv trunks and decoders keep PyTorch's default weights",
    )
    g.boolean("actor_critic_share_weights", True, "one encoder and core for policy and value; False gives each its own")
    g.boolean("adaptive_stddev", True, "continuous actions: the stddev is a network output (else a learned parameter)")
    g.real("continuous_tanh_scale", 0.0, "continuous actions: squash means with scale * tanh (0 disables)")
    g.real("initial_stddev", 1.0, "continuous actions: stddev at initialization")


def _env_flags(g: _Group) -> None:
    g.boolean("use_env_info_cache", False, _only("use_env_info_cache"))
    g.boolean(
        "env_gpu_actions",
        False,
        "with --batched_sampling: the env takes actions as a torch tensor on --device (False: a numpy array on the "
        "CPU); without a GPU the tensor stays on the CPU",
    )
    g.boolean(
        "env_gpu_observations",
        True,
        "with --batched_sampling: an env on the GPU keeps its observations there until they are copied into the "
        "trajectory buffers in one copy; without a GPU nothing changes",
    )
    g.integer("env_frameskip", 1, "env frames per agent step (action repeat); frame counts include them")
    g.integer(
        "env_framestack",
        1,
        "the policy sees the last this-many observations, stacked oldest first along "
        "the first axis (channels of an image); after a reset the first observation fills the stack",
    )
    g.text("pixel_format", "CHW", _only("pixel_format"))
    g.boolean(
        "use_record_episode_statistics",
        False,
        "report each episode from the env's own statistics (gymnasium's RecordEpisodeStatistics `episode` info) "
        "when it ends one, instead of the rewards and steps the rollout loop summed: for envs whose episodes for the "
        "learner are shorter than the real ones or whose rewards are transformed (Atari's lost lives and clipped "
        "rewards; the Atari examples' default)",
    )
    g.boolean(
        "envpool",
        False,
        "step each rollout worker's envs as one EnvPool (its C++ threads, one call per split) instead of one "
        "gymnasium env at a time; for the env families that offer it (atari_*, mujoco_*; pip install "
        "'sf[envpool]'). Evaluation plays the gymnasium version of the env",
    )
    g.choice(
        "envpool_mode",
        ("sync", "async"),
        "sync",
        "with --envpool: sync steps a split's envs in one call that returns when all are done; async sends them "
        "at once and receives each env as it finishes (EnvPool's asynchronous mode)",
    )
    g.integer(
        "envpool_num_threads",
        0,
        "with --envpool: threads of each worker's EnvPool (0: one per core the worker may run on, at most one per env)",
    )
    g.integer(
        "envpool_thread_affinity_offset",
        -1,
        "with --envpool: pin EnvPool's threads to cores from this one on (-1: not pinned)",
    )
    g.integer(
        "env_agents",
        -1,
        "copies each env object steps (Sample Factory's name). With --envpool: envs in each EnvPool, a rollout "
        "worker steps --num_envs_per_worker x --env_agents envs in its one pool (-1: --num_envs_per_worker alone); "
        "with --batched_sampling: read by the env's factory (the tensor and Brax examples; -1: the family's default)",
    )


def _run_flags(g: _Group) -> None:
    g.integer("train_for_env_steps", 10_000_000_000, "stop after this many env frames")
    g.integer("train_for_seconds", 10_000_000_000, "stop after this much wall time")
    g.integer("save_every_sec", 120, "seconds between checkpoints")
    g.integer(
        "stop_timeout_sec",
        5,
        "on a stop (SIGINT, SIGTERM, the end of training), seconds each component gets "
        "to finish its step (a learner its training iteration), save and report before it is killed",
    )
    g.integer(
        "heartbeat_timeout_sec",
        60,
        "a component process whose loop sends no heartbeat for this many seconds (a hung simulator, a stopped "
        "process, a training iteration this long) is named and killed: started again where it can be "
        "(--restart_failed_components), else the run ends",
    )
    g.boolean(
        "restart_failed_components",
        True,
        "a rollout worker (with its env engines) or an inference worker that dies or hangs is started again in place "
        "and the run goes on, its unfinished trajectories dropped; False: such a death ends the run",
    )
    g.integer(
        "max_component_restarts",
        3,
        "restarts of one component within any hour; one more ends the run (--restart_failed_components)",
    )
    g.integer("keep_checkpoints", 2, "checkpoints kept per policy, the newest by version; older ones are deleted")
    g.choice(
        "load_checkpoint_kind",
        ("latest", "best"),
        "latest",
        "checkpoint to resume or evaluate from: the newest, or the best one kept by --save_best_metric",
    )
    g.integer(
        "save_milestones_sec",
        -1,
        "also keep a checkpoint for good in checkpoint_p<i>/milestones/ when this "
        "many seconds have passed since the last one (-1: never)",
    )
    g.integer("save_best_every_sec", 5, "seconds between checks for a new best policy")
    g.text(
        "save_best_metric",
        "reward",
        "episode statistic that defines the best policy, averaged over the last --stats_avg episodes: reward (the "
        "raw episode return), true_objective (the env's info['true_objective'], else the return), len, or a key "
        "of the env's info['episode_extra_stats']; a policy that beats the best so far by more than 0.001 is saved "
        "as checkpoint_p<i>/best_*.pth (one kept)",
    )
    g.integer(
        "save_best_after",
        100_000,
        "env frames before best-policy checkpoints start (early lucky episodes "
        "would otherwise set a best that later policies must beat)",
    )
    g.boolean("benchmark", False, "measure throughput only: no checkpoints, minimal summaries")
    g.boolean(
        "sampling_only",
        False,
        "collect experience without learning: batches are assembled and then "
        "discarded, the policy never changes; FPS measures collection alone (docs/benchmarks.md)",
    )
    g.integer(
        "experiment_summaries_interval",
        10,
        "seconds between the timing snapshots kept in profile_series.jsonl and TensorBoard (timing/ and profile/ "
        "scalars, CPU %%); components send one every 2 s or more often for the live view",
    )
    g.integer("flush_summaries_interval", 30, "seconds between flushes of the TensorBoard writer")
    g.integer("stats_avg", 100, "episodes averaged in the reported statistics")
    g.boolean("summaries_use_frameskip", True, _only("summaries_use_frameskip"))
    g.integer("heartbeat_interval", 20, _only("heartbeat_interval"))
    g.integer("heartbeat_reporting_interval", 180, _only("heartbeat_reporting_interval"))


def _pbt_flags(g: _Group) -> None:
    """Sample Factory's population-based training flags, with its defaults (docs/populations.md)."""
    g.boolean(
        "with_pbt",
        False,
        "population-based training of the --num_policies policies: every --pbt_period_env_steps the worst take a "
        "best one's weights and hyperparameters, the others mutate theirs",
    )
    g.boolean(
        "pbt_mix_policies_in_one_env",
        True,
        "multi-agent envs with several policies: each agent of an env acts for a policy drawn for it alone "
        "(self-play within the population); False: all agents of an env act for one policy. A synchronous run gives "
        "each env one policy",
    )
    g.integer(
        "pbt_period_env_steps",
        5_000_000,
        "env frames of a policy between two of its replacement-or-mutation steps",
    )
    g.integer("pbt_start_mutation", 20_000_000, "env frames a policy trains before its first PBT step")
    g.real(
        "pbt_replace_fraction",
        0.3,
        "share of the population (rounded up) that counts as the best, and as the worst that may be replaced",
    )
    g.real("pbt_mutation_rate", 0.15, "probability that each hyperparameter mutates at a PBT step")
    g.real(
        "pbt_replace_reward_gap",
        0.1,
        "a worst policy is replaced only when its objective is this share of the best one's below it",
    )
    g.real(
        "pbt_replace_reward_gap_absolute",
        1e-6,
        "... and when the two objectives differ by more than this",
    )
    g.boolean("pbt_optimize_gamma", False, "also mutate the discount factor --gamma")
    g.text(
        "pbt_target_objective",
        "true_objective",
        "episode statistic PBT ranks policies by, averaged over the last --stats_avg episodes: true_objective (the "
        "env's info['true_objective'], else the return), reward, len or a key of info['episode_extra_stats']",
    )
    g.real(
        "pbt_perturb_min",
        1.1,
        "a mutated hyperparameter is multiplied or divided by a factor drawn uniformly from "
        "[--pbt_perturb_min, --pbt_perturb_max]",
    )
    g.real("pbt_perturb_max", 1.5, "upper end of the mutation factor (see --pbt_perturb_min)")


def _cluster_flags(g: _Group) -> None:
    """docs/distributed.md."""
    g.choice(
        "backend",
        ("local", "ray"),
        "local",
        "local: every component on this machine; ray: rollout and "
        "inference workers spread over a Ray cluster, one agent per node, learner and runner here "
        "(pip install 'sf[ray]')",
    )
    g.text(
        "ray_address",
        "auto",
        "Ray cluster to join with --backend=ray (auto: the one started with ray start on "
        "this machine; host:port: that head node; local: start a one-machine cluster for this run)",
    )
    g.integer(
        "ray_workers_per_node",
        0,
        "rollout workers per node when --backend=ray spreads them "
        "(0: as evenly as possible over every node, this one first)",
    )
    g.str_list(
        "ray_worker_groups",
        [],
        "RESOURCE:COUNT pairs for --backend=ray; COUNT rollout workers run on a "
        "node started with the custom resource RESOURCE, before the rest is spread",
    )
    g.integer(
        "ray_max_restarts",
        -1,
        "times --backend=ray starts a lost node's agent again (on another node if its node is gone), with the "
        "current weights, before the run ends with an error (needs --async_rl=True); -1: 3 with "
        "--restart_failed_components and --async_rl, else 0",
    )
    g.real(
        "ray_weights_interval_s",
        0.5,
        "with --async_rl=True, a node of --backend=ray receives newer weights at "
        "most this often (every version in synchronous mode): a large model's weights can cost more bandwidth "
        "than its trajectories",
    )
    g.real(
        "ray_chunk_wait_s",
        0.05,
        "a node of --backend=ray sends a policy's finished trajectories when it holds a batch's worth (one chunk) "
        "or when the oldest has waited this long: fewer, larger chunks cost less per frame",
    )
    g.integer(
        "ray_transfers_in_flight",
        2,
        "chunks of trajectories a node may have sent without an "
        "acknowledgement from the driver before it waits (backpressure of --backend=ray)",
    )


def _wandb_flags(g: _Group) -> None:
    g.boolean(
        "with_wandb",
        False,
        "also log every TensorBoard scalar and the config to Weights & Biases "
        "(pip install sf[wandb]; WANDB_MODE=offline keeps the run in <train_dir>/<experiment>/wandb/)",
    )
    g.text("wandb_user", None, "W&B entity (user or team) the run belongs to (default: your W&B default entity)")
    g.text("wandb_project", "sample_factory", "W&B project")
    g.text("wandb_group", None, "W&B group of the run (default: the env name)")
    g.text("wandb_job_type", "SF", "W&B job type")
    g.str_list("wandb_tags", [], "W&B tags of the run")


def _profiling_flags(g: _Group) -> None:
    """The same keys as a `profiling:` YAML section (docs/profiling.md)."""
    g.choice(
        "profiling_backend",
        BACKEND_NAMES,
        "none",
        "profiler run on the selected worker groups (none: nothing is wrapped and no folder is created)",
    )
    g.str_list(
        "profiling_worker_groups",
        [],
        "groups to profile: RolloutWorker InferenceWorker Batcher Learner Runner, or all; none when empty",
    )
    g.int_list("profiling_steps", [], "learner iterations to capture, counting from 1 (empty: the whole life)")
    g.text("profiling_output_dir", None, "where profiler outputs go (default: <train_dir>/<experiment>/profiling/)")
    g.str_list(
        "profiling_options",
        [],
        "nsys profile options as key=value (t=cuda,nvtx -> -t cuda,nvtx; sample=none -> --sample=none)",
    )
    g.str_list("profiling_flags", [], "bare nsys profile flags, named without dashes (python-backtrace)")
    g.str_list("profiling_args", [], "rocprof-sys-python arguments as key=value, rendered like --profiling_options")
    g.str_list("profiling_env", [], "KEY=VALUE environment of the profiled processes (wins over derived values)")
    g.boolean(
        "profiling_timeline",
        False,
        "record every Timing scope of every process and merge them at exit into "
        "profiling/timeline.json (Chrome trace format: Perfetto, chrome://tracing)",
    )
    g.boolean(
        "profiling_cuda_sync",
        False,
        "on CUDA, synchronize at the end of every Timing scope, so GPU work is "
        "charged to the scope that launched it (slower; for attribution only)",
    )


def _evaluation_flags(g: _Group) -> None:
    g.integer("fps", 0, "playback and video frame rate (0: as fast as possible, videos at 30)")
    g.integer(
        "eval_env_frameskip",
        None,
        "frameskip during evaluation, for envs that repeat actions themselves (default: the trained --env_frameskip)",
    )
    g.boolean("no_render", True, _only("no_render"))
    g.boolean("save_video", False, "record the episodes to an mp4 in the experiment folder")
    g.integer("video_frames", 1_000_000_000, "stop recording after this many frames")
    g.text("video_name", None, "file name of the video (default: replay.mp4)")
    g.integer("max_num_frames", 1_000_000_000, "stop after this many env frames")
    g.integer("max_num_episodes", 1_000_000_000, "episodes to play (enjoy plays 5 when the flag is not given)")
    g.integer("policy_index", 0, "policy to evaluate when several were trained")
    g.boolean("eval_deterministic", False, "take the most likely action instead of sampling")
    g.boolean(
        "push_to_hub", False, "after the episodes, upload the policy, its score and the replay to the Hugging Face Hub"
    )
    g.text("hf_repository", None, "the Hub repository to push to, <user>/<repo>")
    g.text("train_script", None, "the module that trains this env, for the model card (default: its family's)")
    g.text("enjoy_script", None, "the module that evaluates this env, for the model card (default: its family's)")


# --- parsing and layering ----------------------------------------------------------------------------


def parse_full_cfg(
    argv_or_parser: list[str] | argparse.ArgumentParser | None = None,
    argv: list[str] | None = None,
    *,
    add_args: AddArgs | None = None,
    defaults: Defaults | None = None,
    evaluation: bool = False,
) -> argparse.Namespace:
    """Parse, layer defaults < `defaults` < YAML < command line, resolve automatic values and validate.

    `parse_full_cfg(argv, add_args=..., defaults=..., evaluation=...)` raises ConfigError naming the bad flag.
    Sample Factory's form, `parse_full_cfg(parser, argv)` with the parser of `parse_sf_args`, takes the flags and
    `set_defaults` a script added to that parser like sf's own, and a bad flag prints one `sf: error:` line and
    exits with status 2, as Sample Factory's parser exits. `cfg.cli_args` holds the flags given on the command line.
    """
    if isinstance(argv_or_parser, argparse.ArgumentParser):
        try:
            return _parse(argv_or_parser, argv, defaults)
        except ConfigError as err:
            _exit_bad_input(err)
    return _parse(make_parser(add_args, evaluation), argv_or_parser, defaults)


def parse_sf_args(
    argv: list[str] | None = None, evaluation: bool = False
) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    """Sample Factory's first parsing pass: sf's parser (with the evaluation flags if `evaluation`) and the flags
    known so far, so that a script can add its own flags to the parser before `parse_full_cfg(parser, argv)`."""
    parser = make_parser(evaluation=evaluation)
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        partial, _ = parser.parse_known_args(argv)
    except argparse.ArgumentError as err:
        _exit_bad_input(ConfigError(f"{err.argument_name}: {err.message}", flag=err.argument_name))
    except ConfigError as err:
        _exit_bad_input(err)
    return parser, partial


def _parse(parser: argparse.ArgumentParser, argv: list[str] | None, defaults: Defaults | None) -> argparse.Namespace:
    argv = sys.argv[1:] if argv is None else list(argv)
    flags = _flag_actions(parser)
    base = _parser_defaults(parser)
    cli = _parse_cli(parser, flags, argv)
    from_yaml = _load_yaml(cli["cfg"], flags) if cli.get("cfg") else {}
    env = cli.get("env", from_yaml.get("env"))
    script = _coerce_all(_script_defaults(defaults, env), flags, "the script's defaults")
    cfg = argparse.Namespace(**{**base, **script, **from_yaml, **cli}, cli_args=cli)
    if cfg.env is None:
        raise ConfigError("--env is required", flag="--env")
    _resolve(cfg, explicit=set(from_yaml) | set(cli))
    validate_cfg(cfg)
    reject_unsupported(cfg)
    _check_packages(cfg)
    cfg.profiling = profiling_config(cfg)
    return cfg


def _check_packages(cfg: argparse.Namespace) -> None:
    """Optional packages a flag needs, checked before anything starts."""
    import importlib.util

    if getattr(cfg, "with_wandb", False) and importlib.util.find_spec("wandb") is None:
        raise ConfigError("--with_wandb=True needs the wandb package: pip install 'sf[wandb]'", flag="--with_wandb")
    if getattr(cfg, "push_to_hub", False) and importlib.util.find_spec("huggingface_hub") is None:
        raise ConfigError(
            "--push_to_hub=True needs the huggingface_hub package: pip install 'sf[huggingface]'", flag="--push_to_hub"
        )
    if getattr(cfg, "backend", "local") == "ray" and importlib.util.find_spec("ray") is None:
        raise ConfigError("--backend=ray needs the ray package: pip install 'sf[ray]'", flag="--backend")


def default_cfg(**overrides: Any) -> argparse.Namespace:
    """Training defaults with `overrides` (flag names) on top, resolved and validated; for tests and libraries."""
    parser = make_parser()
    flags = _flag_actions(parser)
    cfg = argparse.Namespace(
        **{**_parser_defaults(parser), **_coerce_all(overrides, flags, "default_cfg()")}, cli_args={}
    )
    _resolve(cfg, explicit=set(overrides))
    validate_cfg(cfg)
    reject_unsupported(cfg)
    cfg.profiling = profiling_config(cfg)
    return cfg


def main_cfg_or_exit(argv: list[str] | None = None, **kwargs: Any) -> argparse.Namespace:
    """parse_full_cfg for entry points: a bad config prints `sf: error: ...` and exits with status 2."""
    try:
        return parse_full_cfg(argv, **kwargs)
    except ConfigError as err:
        _exit_bad_input(err)


def _exit_bad_input(err: ConfigError) -> NoReturn:
    print(error_line(err), file=sys.stderr)
    sys.exit(2)


def _flag_actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {
        action.dest: action
        for action in parser._actions
        if action.option_strings and not isinstance(action, argparse._HelpAction)
    }


def _parser_defaults(parser: argparse.ArgumentParser) -> dict[str, Any]:
    return vars(parser.parse_known_args([])[0])


def _parse_cli(parser: argparse.ArgumentParser, flags: dict[str, argparse.Action], argv: list[str]) -> dict[str, Any]:
    """Only the flags present in argv (defaults suppressed), already converted; mutates the parser's defaults (and
    drops those a script set with `parser.set_defaults`, which `_parser_defaults` has already read)."""
    for action in flags.values():
        action.default = argparse.SUPPRESS
    parser._defaults.clear()
    try:
        namespace, extras = parser.parse_known_args(argv)
    except argparse.ArgumentError as err:
        raise ConfigError(f"{err.argument_name}: {err.message}", flag=err.argument_name) from None
    if extras:
        raise _unknown_cli_token(extras[0], [option for action in flags.values() for option in action.option_strings])
    return vars(namespace)


def _unknown_cli_token(token: str, options: list[str]) -> ConfigError:
    if not token.startswith("-"):
        return ConfigError(f"unexpected argument {token!r} (flags are written --name=value)")
    name = token.split("=", 1)[0]
    match = difflib.get_close_matches(name, options, n=1)
    hint = f"; did you mean {match[0]}?" if match else " (see --help for all flags)"
    return ConfigError(f"unknown flag {name}{hint}", flag=name)


def _load_yaml(name: str, flags: dict[str, argparse.Action]) -> dict[str, Any]:
    path = _find_yaml(name)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ConfigError(f"--cfg: {path} is not valid YAML: {err}", flag="--cfg") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"--cfg: {path} must be a mapping of flag names to values", flag="--cfg")
    return _coerce_all(flatten_yaml_section(data), flags, str(path))


def _find_yaml(name: str) -> Path:
    """A path as given, else a preset in configs/ (with or without .yaml)."""
    for candidate in (Path(name), PRESETS_DIR / name, PRESETS_DIR / f"{name}.yaml"):
        if candidate.is_file():
            return candidate
    presets = ", ".join(
        sorted(path.relative_to(PRESETS_DIR).with_suffix("").as_posix() for path in PRESETS_DIR.rglob("*.yaml"))
    )
    raise ConfigError(f"--cfg: no file {name!r} and no such preset (presets: {presets})", flag="--cfg")


def _script_defaults(defaults: Defaults | None, env: str | None) -> dict[str, Any]:
    """An example's defaults; a callable gets the env name, and an env it rejects is reported against --env."""
    if defaults is None:
        return {}
    if not callable(defaults):
        return dict(defaults)
    if env is None:
        raise ConfigError("--env is required", flag="--env")
    try:
        return defaults(env)
    except ConfigError:
        raise
    except ValueError as err:
        raise ConfigError(f"--env: {err}", flag="--env") from None


def _coerce_all(values: dict[str, Any], flags: dict[str, argparse.Action], source: str) -> dict[str, Any]:
    """Check names and convert values written outside the command line (YAML, dicts) with the flags' parsers."""
    converted = {}
    for key, value in values.items():
        action = flags.get(key)
        if action is None:
            match = difflib.get_close_matches(key, list(flags), n=1)
            hint = f"; did you mean '{match[0]}'?" if match else ""
            raise ConfigError(f"unknown flag '{key}' in {source}{hint}", flag=f"--{key}")
        if value is not None:  # null (YAML) keeps the flag's default
            converted[key] = _coerce(action, value, source)
    return converted


def _coerce(action: argparse.Action, value: Any, source: str) -> Any:
    flag = action.option_strings[0]
    if action.nargs in ("*", "+"):
        items = value if isinstance(value, (list, tuple)) else [value]
        return [_convert(action, item, flag, source) for item in items]
    return _convert(action, value, flag, source)


def _convert(action: argparse.Action, value: Any, flag: str, source: str) -> Any:
    """Run the flag's parser on the value's text form, so `true`, `3` and `1e-4` mean what they mean on the CLI."""
    if action.type is None:
        return value
    try:
        return action.type(value if isinstance(value, str) else str(value))
    except (argparse.ArgumentTypeError, ValueError, TypeError) as err:
        raise ConfigError(f"{flag}: {err} (in {source})", flag=flag) from None


def _resolve(cfg: argparse.Namespace, explicit: set[str]) -> None:
    """Fill the automatic values; `explicit` are flags the user set (command line, YAML, overrides)."""
    if cfg.recurrence == -1:
        cfg.recurrence = cfg.rollout if cfg.use_rnn else 1
    if cfg.serial_mode and cfg.async_rl:
        if "async_rl" in explicit:
            raise ConfigError(
                "--async_rl=True conflicts with --serial_mode=True: serial mode trains synchronously, "
                "set --async_rl=False or leave it out",
                flag="--async_rl",
            )
        cfg.async_rl = False
    if cfg.env_threads == 0:
        cfg.env_threads = auto_env_threads(cfg)
    if cfg.envpool and cfg.env_agents > 1:
        cfg.num_envs_per_worker *= cfg.env_agents  # one pool per worker holds them all


def auto_env_threads(cfg: argparse.Namespace) -> int:
    """`--env_threads=0`: every core steps envs in a serial run, where nothing else runs while they step; one
    thread in a parallel run, and where a main-thread profiler (running now, or asked for) would lose the steps."""
    if not cfg.serial_mode or sys.getprofile() is not None or cfg.profiling_backend in MAIN_THREAD_PROFILERS:
        return 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, cfg.num_envs_per_worker // cfg.worker_num_splits))


# --- devices and persistence -------------------------------------------------------------------------


def describe_device(device: str) -> str:
    """For the log: "cpu", or "cuda (NVIDIA H100 80GB HBM3)"."""
    if device == "cpu":
        return device
    import torch

    return f"{device} ({torch.cuda.get_device_name(0)})"


def resolve_device(cfg: argparse.Namespace) -> str:
    """ "cuda" or "cpu" for --device: gpu and auto take CUDA when it exists, and fall back to the CPU otherwise."""
    if cfg.device == "cpu":
        return "cpu"
    import torch  # here, not at the top: parsing flags and --help should not pay for importing torch

    if torch.cuda.is_available():
        return "cuda"
    if cfg.device == "gpu" and "device" in getattr(cfg, "cli_args", {}):
        log.warning("--device=gpu was given but no CUDA device is available; running on the CPU")
    return "cpu"


def cfg_to_dict(cfg: argparse.Namespace) -> dict[str, Any]:
    """The config as plain JSON types (anything else becomes its string form), for config.json."""
    return json.loads(json.dumps(vars(cfg), default=_json_default))


def _json_default(value: Any) -> Any:
    """Dataclasses (the profiling section) as their fields; anything else as its string form."""
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    return str(value)


def load_cfg_json(path: str | Path) -> argparse.Namespace:
    """A saved config.json; flags added to sf after it was written get their current defaults."""
    saved = json.loads(Path(path).read_text())
    return argparse.Namespace(**{**_parser_defaults(make_parser()), "cli_args": {}, **saved})
