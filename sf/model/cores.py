"""Recurrent cores. RNN state travels as one flat float tensor [B, state_size] so buffers and queues stay
plain tensors: GRU state is the layers' h side by side, LSTM state is all h followed by all c.

`IdentityCore` and `RnnCore` are the model factory's first core (`default_make_core_func`); `ModelCore` is the base
class of one a user registers instead (Sample Factory's `sample_factory.model.core.ModelCore`).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence

from sf.model.model_utils import ModelModule
from sf.model.sequences import run_packed
from sf.utils.logging import log


def recurrent_state_size(cfg) -> int:
    """Floats of state one core keeps per env: what `--use_rnn`, `--rnn_type`, `--rnn_size` and `--rnn_num_layers`
    ask for (h per layer, and c too for an LSTM); none without `--use_rnn`."""
    if not cfg.use_rnn:
        return 0
    return cfg.rnn_size * cfg.rnn_num_layers * (2 if cfg.rnn_type == "lstm" else 1)


def step_through(core: nn.Module, x: torch.Tensor, h0: torch.Tensor, dones: torch.Tensor) -> torch.Tensor:
    """`forward_seq` of any core that takes one step at a time: x [N, T, F] from h0 [N, S], one call per step, the
    state zeroed after each step whose `dones` is 1. Returns [N, T, F2]."""
    h, outs = h0, []
    for t in range(x.shape[1]):
        out, h = core(x[:, t], h)
        outs.append(out)
        if t + 1 < x.shape[1]:
            h = h * (1.0 - dones[:, t]).to(h.dtype).unsqueeze(1)
    return torch.stack(outs, dim=1)


def sequences_or_steps(owner: nn.Module, core, x: torch.Tensor, h0: torch.Tensor, dones: torch.Tensor) -> torch.Tensor:
    """x [N, T, F] through `core(input, state)` as Sample Factory's learner runs a core: once, over a PackedSequence
    of the window's episode pieces (`sf.model.sequences`). A core written for one step at a time, which fails on a
    PackedSequence, is said once in the log and stepped through from then on (`step_through`). Returns [N, T, F2]."""
    if not getattr(owner, "_steps_only", False):
        try:
            return run_packed(core, x, h0, dones)
        except Exception as error:  # noqa: BLE001 - whatever a one-step core raises on a sequence; the steps re-raise
            owner._steps_only = True
            log.info(
                "%s does not take a PackedSequence (%s: %s): the learner runs it one step at a time",
                type(owner).__name__,
                type(error).__name__,
                str(error).splitlines()[0] if str(error) else "",
            )
    return step_through(core, x, h0, dones)


class ModelCore(ModelModule):
    """Features [B, F] and the state [B, state_size] -> (output [B, get_out_size()], new state [B, state_size]).
    A registered core factory is called as `factory(cfg, input_size)`. The state is one flat float tensor per env,
    `recurrent_state_size(cfg)` floats unless the core sets `state_size` itself. In the learner, as in Sample
    Factory, `forward` gets whole sequences: a `PackedSequence` of episode pieces and their first states
    [pieces, state_size] (`forward_seq`); a core that fails on one is run one step at a time."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.core_output_size = -1  # to be set by the subclass
        self.state_size = recurrent_state_size(cfg)

    def get_out_size(self) -> int:
        return self.core_output_size

    def forward_seq(self, x: torch.Tensor, h0: torch.Tensor, dones: torch.Tensor) -> torch.Tensor:
        return sequences_or_steps(self, self, x, h0, dones)


class IdentityCore(nn.Module):
    """`--use_rnn=False`: features pass through and the state is empty."""

    state_size = 0

    def __init__(self, input_size: int):
        super().__init__()
        self.out_size = input_size

    def get_out_size(self) -> int:
        return self.out_size

    def forward(self, x: torch.Tensor, h: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        return x, h if h is not None else x[:, :0]  # [B, 0]: a view, no allocation

    def forward_seq(self, x: torch.Tensor, h0: torch.Tensor | None, dones: torch.Tensor) -> torch.Tensor:
        return x


class RnnCore(nn.Module):
    """nn.GRU / nn.LSTM with a flat state, one step at a time or over [N, T] sequences with episode resets."""

    def __init__(self, input_size: int, rnn_type: str, rnn_size: int, num_layers: int):
        super().__init__()
        if rnn_type not in ("gru", "lstm"):
            raise ValueError(f"--rnn_type={rnn_type!r} is not one of gru, lstm")
        rnn_cls = nn.GRU if rnn_type == "gru" else nn.LSTM
        self.rnn = rnn_cls(input_size, rnn_size, num_layers, batch_first=True)
        self.is_lstm = rnn_type == "lstm"
        self.num_layers, self.rnn_size = num_layers, rnn_size
        self.out_size = rnn_size
        self.state_size = rnn_size * num_layers * (2 if self.is_lstm else 1)

    def get_out_size(self) -> int:
        return self.out_size

    def _unflatten(self, h: torch.Tensor | None):
        """[B, S] -> what nn.GRU / nn.LSTM take ([L, B, H], or a pair of them)."""
        if h is None:
            return None

        def layers(s: torch.Tensor) -> torch.Tensor:
            return s.reshape(h.shape[0], self.num_layers, self.rnn_size).transpose(0, 1).contiguous()

        if self.is_lstm:
            half = self.state_size // 2
            return layers(h[:, :half]), layers(h[:, half:])
        return layers(h)

    def _flatten(self, state) -> torch.Tensor:
        def flat(s: torch.Tensor) -> torch.Tensor:
            return s.transpose(0, 1).reshape(s.shape[1], -1)

        return torch.cat([flat(state[0]), flat(state[1])], dim=1) if self.is_lstm else flat(state)

    def forward(self, x: torch.Tensor | PackedSequence, h: torch.Tensor | None):
        """One step: x [B, F], h [B, S] (None means zeros) -> (out [B, H], new h [B, S]); or, as Sample Factory's
        core, a PackedSequence with its sequences' first states -> (a PackedSequence, their last states)."""
        if isinstance(x, PackedSequence):
            out, state = self.rnn(x, self._unflatten(h))
            return out, self._flatten(state)
        out, state = self.rnn(x.unsqueeze(1), self._unflatten(h))
        return out.squeeze(1), self._flatten(state)

    def forward_seq(self, x: torch.Tensor, h0: torch.Tensor, dones: torch.Tensor) -> torch.Tensor:
        """x [N, T, F] from state h0 [N, S]; dones[:, t] == 1 zeroes the state before step t+1. Returns [N, T, H].

        The window is cut before every step at which some row starts afresh; each piece is one RNN call over all
        rows, from the state the previous piece left with the reset rows zeroed. Without resets that is a single
        call. Packed episode fragments would do the same arithmetic in one call, but on the CPU their backward
        pass is two to three times slower than the unpacked one (docs/performance.md, section 20).
        """
        n, t = x.shape[:2]
        cuts = ((dones[:, :-1] != 0).any(0).nonzero().squeeze(1) + 1).tolist()
        state, pieces = self._unflatten(h0), []
        for begin, end in zip([0, *cuts], [*cuts, t]):
            if begin > 0:
                keep = (1.0 - dones[:, begin - 1]).to(h0.dtype).view(1, n, 1)
                state = tuple(s * keep for s in state) if self.is_lstm else state * keep
            out, state = self.rnn(x[:, begin:end], state)
            pieces.append(out)
        return pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim=1)


class ModelCoreRNN(RnnCore):
    """Sample Factory's `ModelCoreRNN(cfg, input_size)`: sf's GRU or LSTM core as `--rnn_type`, `--rnn_size` and
    `--rnn_num_layers` ask, for a model of one's own that builds it by that name."""

    def __init__(self, cfg, input_size: int):
        super().__init__(input_size, cfg.rnn_type, cfg.rnn_size, cfg.rnn_num_layers)


def default_make_core_func(cfg, input_size: int) -> IdentityCore | RnnCore:
    """The model factory's first core: a GRU or LSTM with `--use_rnn`, features passed through without."""
    if not cfg.use_rnn:
        return IdentityCore(input_size)
    return RnnCore(input_size, cfg.rnn_type, cfg.rnn_size, cfg.rnn_num_layers)
