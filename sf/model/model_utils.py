"""The building blocks of a network, by Sample Factory's names (`sample_factory.model.model_utils`): the nonlinearity
a config asks for, an MLP, the base class of every part a user registers, and the size of a module's output.

A user's encoder, core or decoder built from these gets sf's activations (ELU and tanh as numba kernels on the CPU,
`sf.model.activations`) without asking for them.
"""

from __future__ import annotations

import torch
from torch import nn

from sf.model.activations import Activation

NONLINEARITIES = ("elu", "relu", "tanh")


def activation(name: str, inplace: bool = False) -> nn.Module:
    """The nonlinearity; `inplace` where its input is a fresh layer output that nothing else reads. ELU and tanh run
    as numba kernels on the CPU (`sf.model.activations`); in place they keep no second tensor, and their backward
    works from the output (for ELU without an exp)."""
    if name not in NONLINEARITIES:
        raise ValueError(f"--nonlinearity={name!r} is not one of {', '.join(NONLINEARITIES)}")
    return nn.ReLU(inplace=inplace) if name == "relu" else Activation(name, inplace)


def nonlinearity(cfg, inplace: bool = False) -> nn.Module:
    """`--nonlinearity` as a module (Sample Factory's `nonlinearity(cfg)`)."""
    return activation(cfg.nonlinearity, inplace)


class Mlp(nn.Sequential):
    """Linear layers of the given sizes, each followed by the nonlinearity; no layers means identity."""

    def __init__(self, in_size: int, layer_sizes: list[int], nonlinearity: str):
        layers: list[nn.Module] = []
        for size in layer_sizes:
            layers += [nn.Linear(in_size, size), activation(nonlinearity, inplace=True)]
            in_size = size
        super().__init__(*layers)
        self.out_size = in_size

    def get_out_size(self) -> int:
        return self.out_size


def create_mlp(layer_sizes: list[int], input_size: int, activation: nn.Module) -> nn.Module:
    """Sample Factory's `create_mlp`: Linear layers, each followed by `activation`; identity for no layers."""
    layers: list[nn.Module] = []
    for size in layer_sizes:
        layers += [nn.Linear(input_size, size), activation]
        input_size = size
    return nn.Sequential(*layers) if layers else nn.Identity()


class ModelModule(nn.Module):
    """What every registered part derives from: it keeps the config and reports the size of its output."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg

    def get_out_size(self) -> int:
        raise NotImplementedError(f"{type(self).__name__} must say the size of its output (get_out_size)")


def calc_num_elements(module: nn.Module, module_input_shape: tuple[int, ...]) -> int:
    """Features per sample `module` outputs for inputs of this shape (one zero sample through it)."""
    with torch.no_grad():
        return module(torch.zeros(1, *module_input_shape)).numel()


def model_device(model: nn.Module) -> torch.device | None:
    """Where the model's parameters live; None for a model without parameters."""
    parameter = next(model.parameters(), None)
    return parameter.device if parameter is not None else None
