"""Decoders: the core's output -> the features the action and value heads read.

`MlpDecoder` (`--decoder_mlp_layers`) is the model factory's first decoder (`default_make_decoder_func`); `Decoder` is
the base class of one a user registers instead (Sample Factory's `sample_factory.model.decoder.Decoder`).
"""

from __future__ import annotations

from sf.model.model_utils import Mlp, ModelModule


class Decoder(ModelModule):
    """Core output [B, F] -> features [B, get_out_size()]. A registered decoder factory is called as
    `factory(cfg, input_size)`."""


class MlpDecoder(Mlp):
    """`--decoder_mlp_layers` over the core's output (no layers: the output as it is)."""

    def __init__(self, cfg, input_size: int):
        super().__init__(input_size, list(cfg.decoder_mlp_layers), cfg.nonlinearity)


def default_make_decoder_func(cfg, input_size: int) -> MlpDecoder:
    """The model factory's first decoder."""
    return MlpDecoder(cfg, input_size)
