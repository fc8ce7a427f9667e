"""Recurrent cores. RNN state travels as one flat float tensor [B, state_size] so buffers and queues stay
plain tensors: GRU state is the layers' h side by side, LSTM state is all h followed by all c.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


class IdentityCore(nn.Module):
    """`--use_rnn=False`: features pass through and the state is empty."""

    state_size = 0

    def __init__(self, input_size: int):
        super().__init__()
        self.out_size = input_size

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

    def forward(self, x: torch.Tensor, h: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """One step: x [B, F], h [B, S] (None means zeros) -> (out [B, H], new h [B, S])."""
        out, state = self.rnn(x.unsqueeze(1), self._unflatten(h))
        return out.squeeze(1), self._flatten(state)

    def forward_seq(self, x: torch.Tensor, h0: torch.Tensor, dones: torch.Tensor) -> torch.Tensor:
        """x [N, T, F] from state h0 [N, S]; dones[:, t] == 1 zeroes the state before step t+1. Returns [N, T, H].

        Without resets inside the window this is one RNN call over the whole batch. With resets, every row is
        cut into episode fragments that run as one packed batch, each from zeros except a row's first fragment,
        which starts from h0: still a single RNN call, never a Python loop over steps.
        """
        resets = dones[:, :-1] != 0
        if not bool(resets.any()):
            return self.rnn(x, self._unflatten(h0))[0]
        return self._forward_fragments(x, h0, resets)

    def _forward_fragments(self, x: torch.Tensor, h0: torch.Tensor, resets: torch.Tensor) -> torch.Tensor:
        n, t = x.shape[:2]
        starts = torch.ones(n, t, dtype=torch.bool, device=x.device)
        starts[:, 1:] = resets
        starts = starts.reshape(-1)
        fragment = starts.cumsum(0) - 1  # fragment id of every step, in row-major order
        begin = starts.nonzero().squeeze(1)  # flat index of each fragment's first step
        position = torch.arange(n * t, device=x.device) - begin[fragment]
        lengths = torch.diff(begin, append=begin.new_tensor([n * t])).cpu()  # fragments never cross rows

        padded = x.new_zeros(begin.numel(), int(lengths.max()), x.shape[2])
        padded = padded.index_put((fragment, position), x.reshape(n * t, -1))
        first_of_row = (begin % t == 0).unsqueeze(1).to(h0.dtype)
        h_fragments = h0.index_select(0, begin // t) * first_of_row

        packed = pack_padded_sequence(padded, lengths, batch_first=True, enforce_sorted=False)
        out, _ = pad_packed_sequence(self.rnn(packed, self._unflatten(h_fragments))[0], batch_first=True)
        return out[fragment, position].view(n, t, -1)


def create_core(cfg, input_size: int) -> IdentityCore | RnnCore:
    if not cfg.use_rnn:
        return IdentityCore(input_size)
    return RnnCore(input_size, cfg.rnn_type, cfg.rnn_size, cfg.rnn_num_layers)
