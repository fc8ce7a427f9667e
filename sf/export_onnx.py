"""Export a trained policy to ONNX: `python -m sf.export_onnx --env=<env> --experiment=<name>` (Sample Factory's
module name, its evaluation flags), or `export_onnx(cfg, path)` from a script that registered its own env and model.

The graph is the whole policy step: observation normalization, the encoder, the core and the action and value heads,
custom parts included. Its inputs are the observations as sf's buffers hold them, one per key (`obs` for a plain
Box; uint8 images channels first, [B, C, H, W]; a Discrete one-hot), and with a recurrent core `rnn_states`
[B, state size] (zeros at an episode's start). Its outputs:

- `output_actions` [B, actions]: the most likely action in sf's flat layout (each categorical's index as a float,
  then the Gaussian means);
- `output_action_logits` [B, parameters]: the distribution's parameters (categorical logits, then the Gaussian
  means and log stddevs), to sample from;
- `output_values` [B]: the value, in return space;
- `output_rnn_states` [B, state size], with a recurrent core: the state to feed back with the next observation.

The batch dimension is dynamic. numba kernels (activations, image normalization) step aside while the graph is
traced, so it records torch's own operators.
"""

from __future__ import annotations

import argparse
import logging
import sys
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

from sf.cfg.arguments import make_parser
from sf.enjoy import load_policy, merged_cfg
from sf.envs import EnvAdapter, EnvConfig, EnvNotFoundError, UnsupportedSpaceError, create_env
from sf.envs.families import family_of
from sf.envs.spaces import EnvInfo
from sf.utils.errors import ConfigError, error_line
from sf.utils.fast_exit import skip_final_collection
from sf.utils.logging import setup_logging

log = logging.getLogger("sf")

OPSET = 17


class OnnxPolicy(nn.Module):
    """The policy as one function of positional tensors (what the exporter traces): the observation keys in order,
    then the RNN state if the model keeps one."""

    def __init__(self, model: nn.Module, obs_keys: list[str]):
        super().__init__()
        self.model = model
        self.obs_keys = obs_keys

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        obs = dict(zip(self.obs_keys, inputs))
        rnn_states = inputs[len(self.obs_keys)] if self.model.rnn_state_size else None
        out = self.model.policy_step(self.model.normalize_obs(obs), rnn_states, deterministic=True)
        outputs = (out.actions, out.action_logits, out.values)
        return (*outputs, out.new_rnn_states) if rnn_states is not None else outputs


def input_names(info: EnvInfo, rnn_state_size: int) -> list[str]:
    return [*info.obs_spec, *(["rnn_states"] if rnn_state_size else [])]


def output_names(rnn_state_size: int) -> list[str]:
    names = ["output_actions", "output_action_logits", "output_values"]
    return [*names, "output_rnn_states"] if rnn_state_size else names


def example_inputs(info: EnvInfo, rnn_state_size: int, batch: int = 2) -> tuple[torch.Tensor, ...]:
    obs = [torch.from_numpy(np.zeros((batch, *shape), dtype)) for shape, dtype in info.obs_spec.values()]
    return (*obs, *([torch.zeros(batch, rnn_state_size)] if rnn_state_size else []))


def write_onnx(model: nn.Module, info: EnvInfo, path: str | Path) -> Path:
    """Trace `model` (an ActorCritic, in eval mode, on the CPU) and write it to `path`."""
    path = Path(path)
    names_in, names_out = input_names(info, model.rnn_state_size), output_names(model.rnn_state_size)
    with torch.no_grad(), warnings.catch_warnings():
        # the TorchScript-based exporter: tracing sees what the numba kernels leave to torch, and it needs no onnxscript
        warnings.filterwarnings("ignore", "You are using the legacy TorchScript-based ONNX export", DeprecationWarning)
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.onnx")
        # the recurrent state is an input of the graph, which is what this warning asks for
        warnings.filterwarnings("ignore", "Exporting a model to ONNX with a batch_size other than 1", UserWarning)
        # nn.GRU checks its input's size in Python: the sizes are the model's own, the same in every call
        warnings.filterwarnings("ignore", category=torch.jit.TracerWarning, module=r"torch\.nn\.modules\.rnn")
        torch.onnx.export(
            OnnxPolicy(model, list(info.obs_spec)),
            example_inputs(info, model.rnn_state_size),
            str(path),
            input_names=names_in,
            output_names=names_out,
            dynamic_axes={name: {0: "batch"} for name in names_in + names_out},
            opset_version=OPSET,
            dynamo=False,
        )
    return path


def export_onnx(cfg, f: str | Path) -> int:
    """Sample Factory's `export_onnx(cfg, f)`: the experiment's policy (as `--load_checkpoint_kind` picks it) to
    the ONNX file `f`; returns the exit status. Every error is one `sf: error:` line, as enjoy's: status 2 for what
    the flags or this process's registrations ask for (no such experiment or checkpoint, an env or a model the
    training script registered and this process has not, a checkpoint of another model), 1 when the export fails."""
    skip_final_collection()
    setup_logging(cfg.log_level)
    try:
        merged = merged_cfg(cfg)
        info = _env_info(merged)
        model = load_policy(merged, info, "cpu", cli_cfg=cfg)  # traced on the CPU; the graph runs anywhere
    except ConfigError as err:
        print(error_line(err), file=sys.stderr)
        return 2
    try:
        path = write_onnx(model, info, f)
    except Exception as err:  # noqa: BLE001 - the tracer's or the file system's, said in one line as the others
        cause = str(err).strip().splitlines()[0] if str(err).strip() else ""
        print(f"sf: error: cannot export {merged.experiment} to {f}: {type(err).__name__}: {cause}", file=sys.stderr)
        return 1
    log.info("policy written to %s (inputs: %s)", path, ", ".join(input_names(info, model.rnn_state_size)))
    return 0


def _env_info(cfg) -> EnvInfo:
    """What the policy's inputs and outputs are, from one env of the experiment's (closed again)."""
    try:
        env = EnvAdapter(create_env(cfg.env, cfg, EnvConfig()), cfg.env_framestack)
    except EnvNotFoundError as exc:
        raise ConfigError(
            f"--env: {exc}; an env a training script registers (register_env) is exported by a script that registers "
            "it too and calls export_onnx(cfg, path) (docs/customizing.md, ONNX export)",
            flag="--env",
        ) from None
    except UnsupportedSpaceError as exc:
        raise ConfigError(f"--env: {exc}", flag="--env") from None
    try:
        return EnvInfo(env.obs_spec, env.action_spec, env.reward_scale, env.frameskip)
    finally:
        env.close()


def add_export_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--onnx_path", type=str, default=None, help="file to write (default: <experiment>.onnx in the current folder)"
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:  # a first pass for the env, which names the family whose flags and registrations apply (and for --help)
        known, _ = make_parser(add_export_args, evaluation=True).parse_known_args(argv)
    except (ConfigError, argparse.ArgumentError) as err:
        print(error_line(err if isinstance(err, ConfigError) else ConfigError(str(err))), file=sys.stderr)
        return 2
    if known.env is None:
        print(error_line(ConfigError("--env is required", flag="--env")), file=sys.stderr)
        return 2
    cfg = family_of(known.env).cfg_or_exit(argv, evaluation=True, add_args=add_export_args)
    return export_onnx(cfg, cfg.onnx_path or f"{cfg.experiment}.onnx")


if __name__ == "__main__":
    sys.exit(main())
