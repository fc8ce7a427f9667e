"""How the learner's newest weights reach the inference workers.

Serial placement shares the model object itself, so there is nothing to copy. Parallel placement keeps
one copy of the state dict in shared memory guarded by a lock, plus a version counter the inference
workers poll before each forward pass (a single integer read while nothing changed).

A process killed while it holds the lock (an inference worker loading weights) never releases it. Waits for the
lock therefore give up once the run is stopping (`stop_event`), which the runner sets as soon as it sees the death:
the learner then goes on to its final checkpoint and profile instead of waiting forever to publish.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

LOCK_POLL_S = 0.25  # how often a wait for the lock looks whether the run is stopping


class LocalPolicyStore:
    """Learner and inference worker hold the same module: publishing only bumps the version."""

    def __init__(self):
        self.version = 0

    def publish(self, model: nn.Module, version: int) -> None:
        self.version = version

    def maybe_load(self, model: nn.Module, current: int) -> int:
        return self.version


class SharedPolicyStore:
    def __init__(self, model: nn.Module, lock, stop_event=None):
        self.params = {k: v.detach().to("cpu", copy=True).share_memory_() for k, v in model.state_dict().items()}
        self.version_t = torch.zeros(1, dtype=torch.int64).share_memory_()
        self.lock = lock
        self.stop_event = stop_event

    @contextmanager
    def _locked(self) -> Iterator[bool]:
        """Hold the lock for the block; yields False, without it, if the run stops while waiting."""
        while not self.lock.acquire(timeout=LOCK_POLL_S):
            if self.stop_event is not None and self.stop_event.is_set():
                yield False
                return
        try:
            yield True
        finally:
            self.lock.release()

    @property
    def version(self) -> int:
        return int(self.version_t[0])

    def publish(self, model: nn.Module, version: int) -> None:
        self.publish_state(model.state_dict(), version)

    def publish_state(self, state: dict, version: int) -> None:
        """Weights as a state dict of tensors or numpy arrays (a node of a cluster receives them so)."""
        with torch.no_grad(), self._locked() as held:
            if not held:
                return
            for key, value in state.items():
                self.params[key].copy_(torch.as_tensor(value))
            self.version_t[0] = version

    def state(self) -> tuple[int, dict]:
        """(version, a copy of the published weights), read under the lock (without it once the run is stopping
        and the lock's holder is gone)."""
        with self._locked():
            return int(self.version_t[0]), {key: value.clone() for key, value in self.params.items()}

    def maybe_load(self, model: nn.Module, current: int) -> int:
        """Load the published weights if they are newer than `current`; return the version now held."""
        if int(self.version_t[0]) == current:
            return current
        with self._locked() as held:
            if not held:
                return current
            model.load_state_dict(self.params)
            return int(self.version_t[0])
