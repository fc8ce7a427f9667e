"""`TensorDict`, Sample Factory's name for what an actor-critic's `forward` and `forward_tail` return: a dict of
tensors (`values`, `action_logits`, `actions`, `log_prob_actions`, `new_rnn_states`) that a string key reads as a
dict and any other key (an index, a slice, a mask) indexes every tensor in it, nested dicts included."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


class TensorDict(dict):
    """`td["values"]` is the tensor; `td[idx]` is a new TensorDict of every tensor indexed by `idx`;
    `td[idx] = other` copies `other`'s tensors (or arrays) into the indexed rows, key by key."""

    def __getitem__(self, key):
        if isinstance(key, str):
            return dict.__getitem__(self, key)
        return TensorDict({name: _index(value, key) for name, value in self.items()})

    def __setitem__(self, key, value) -> None:
        if isinstance(key, str):
            dict.__setitem__(self, key, value)
            return
        for name, new in value.items():
            _assign(dict.__getitem__(self, name), key, new)


def _index(value: Any, key):
    if isinstance(value, dict):
        return TensorDict({name: _index(v, key) for name, v in value.items()})
    return value[key]


def _assign(target: Any, key, new: Any) -> None:
    if isinstance(new, dict):
        for name, v in new.items():
            _assign(target[name], key, v)
    elif torch.is_tensor(target):
        target[key].copy_(new if torch.is_tensor(new) else torch.as_tensor(np.asarray(new)))
    elif isinstance(target, np.ndarray):
        target[key] = new.detach().cpu().numpy() if torch.is_tensor(new) else new
    else:
        raise TypeError(f"cannot copy into a {type(target).__name__}: TensorDict holds tensors and numpy arrays")
