"""Learner trajectories as one `PackedSequence` of episode pieces, the way Sample Factory hands a recurrent core
whole sequences: each row of a [N, T] window is cut after every step whose reset flag is set, each piece becomes one
sequence (the longest first, as `PackedSequence` wants them), and a core runs over all of them in one call.

A piece that starts a row begins from that row's stored state; a piece that starts after a reset begins from zeros
(what stepping through the window with the state zeroed at a reset computes)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.nn.utils.rnn import PackedSequence

SequenceCore = Callable[[PackedSequence, torch.Tensor], tuple[PackedSequence, torch.Tensor]]


@dataclass(frozen=True)
class Pieces:
    """Where the pieces of a window lie: `order` lists the window's flat steps (row * T + t) in packed order."""

    order: torch.Tensor  # [N * T] int64
    batch_sizes: torch.Tensor  # [longest piece] int64, on the CPU as PackedSequence wants
    first_step: torch.Tensor  # [pieces] flat step each piece starts at, longest piece first
    starts_row: torch.Tensor  # [pieces] bool: the piece starts at t = 0 (from the stored state)


def cut_pieces(resets: torch.Tensor) -> Pieces:
    """The pieces of a [N, T] window whose `resets` (nonzero after a step) end an episode or a valid stretch."""
    n, t = resets.shape
    starts = torch.zeros(n, t, dtype=torch.bool, device=resets.device)
    starts[:, 0] = True
    starts[:, 1:] = resets[:, :-1] != 0
    first_step = starts.reshape(-1).nonzero().squeeze(1)
    lengths = torch.diff(first_step, append=first_step.new_tensor([n * t]))
    lengths, by_length = torch.sort(lengths, descending=True, stable=True)
    first_step = first_step.index_select(0, by_length)
    offsets = torch.arange(int(lengths[0]), device=resets.device)
    inside = offsets.unsqueeze(0) < lengths.unsqueeze(1)  # [pieces, longest]
    steps = first_step.unsqueeze(1) + offsets.unsqueeze(0)
    order = steps.t().masked_select(inside.t())  # time-major: step k of every piece long enough, longest first
    batch_sizes = inside.sum(0).cpu()
    return Pieces(order, batch_sizes, first_step, first_step % t == 0)


def run_packed(core: SequenceCore, x: torch.Tensor, h0: torch.Tensor, resets: torch.Tensor) -> torch.Tensor:
    """x [N, T, F] through `core` in one call over the window's pieces; h0 [N, S]. Returns [N, T, F2]."""
    n, t = resets.shape
    pieces = cut_pieces(resets)
    packed = PackedSequence(x.reshape(n * t, -1).index_select(0, pieces.order), pieces.batch_sizes)
    rows = torch.div(pieces.first_step, t, rounding_mode="floor")
    start = h0.index_select(0, rows) * pieces.starts_row.to(h0.dtype).unsqueeze(1)
    out, _ = core(packed, start)
    data = out.data if isinstance(out, PackedSequence) else out
    back = torch.empty_like(pieces.order)
    back[pieces.order] = torch.arange(pieces.order.numel(), device=back.device)
    return data.index_select(0, back).view(n, t, -1)
