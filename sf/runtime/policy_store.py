"""How the learner's newest weights reach the inference workers.

Serial placement shares the model object itself, so there is nothing to copy. Parallel placement keeps one copy of
the state dict in shared memory with a version counter the inference workers poll before each forward pass (a single
integer read while nothing changed), published under a sequence count (a seqlock) rather than a lock: the learner,
the one writer, makes the count odd while it copies and even again after; a reader copies and keeps what it copied
only if the count was even and the same before and after, else copies again. Nobody waits for anybody, so a process
killed while it reads (an inference worker loading weights, killed and restarted in place) or writes leaves nothing
taken. A writer killed mid-copy leaves the count odd: its readers wait, giving up once the run is stopping
(`stop_event`), which the death of a learner brings about.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import torch
from torch import nn

READ_POLL_S = 0.001  # how long a reader waits for a publication under way before it looks again
T = TypeVar("T")


class LocalPolicyStore:
    """Learner and inference worker hold the same module: publishing only bumps the version."""

    def __init__(self):
        self.version = 0

    def publish(self, model: nn.Module, version: int) -> None:
        self.version = version

    def maybe_load(self, model: nn.Module, current: int) -> int:
        return self.version


class SharedPolicyStore:
    def __init__(self, model: nn.Module, stop_event=None):
        self.params = {k: v.detach().to("cpu", copy=True).share_memory_() for k, v in model.state_dict().items()}
        self.version_t = torch.zeros(1, dtype=torch.int64).share_memory_()
        self.seq_t = torch.zeros(1, dtype=torch.int64).share_memory_()  # odd while a publication is under way
        self.stop_event = stop_event

    @property
    def version(self) -> int:
        return int(self.version_t[0])

    def publish(self, model: nn.Module, version: int) -> None:
        self.publish_state(model.state_dict(), version)

    def publish_state(self, state: dict, version: int) -> None:
        """Weights as a state dict of tensors or numpy arrays (a node of a cluster receives them so)."""
        with torch.no_grad():
            self.seq_t[0] += 1
            for key, value in state.items():
                self.params[key].copy_(torch.as_tensor(value))
            self.version_t[0] = version
            self.seq_t[0] += 1

    def _read(self, copy: Callable[[], T]) -> T | None:
        """`copy()` run until it ran with no publication under way or in between; None if the run stops first."""
        while True:
            before = int(self.seq_t[0])
            if before % 2 == 0:
                result = copy()
                if int(self.seq_t[0]) == before:
                    return result
            if self.stop_event is not None and self.stop_event.is_set():
                return None
            time.sleep(READ_POLL_S)

    def state(self) -> tuple[int, dict]:
        """(version, a copy of the published weights)."""
        read = self._read(lambda: (int(self.version_t[0]), {key: value.clone() for key, value in self.params.items()}))
        return read if read is not None else (int(self.version_t[0]), {k: v.clone() for k, v in self.params.items()})

    def maybe_load(self, model: nn.Module, current: int) -> int:
        """Load the published weights if they are newer than `current`; return the version now held."""
        if int(self.version_t[0]) == current:
            return current

        def load() -> int:
            model.load_state_dict(self.params)
            return int(self.version_t[0])

        loaded = self._read(load)
        return current if loaded is None else loaded
