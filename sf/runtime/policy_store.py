"""How the learner's newest weights reach the inference workers.

Serial placement shares the model object itself, so there is nothing to copy. Parallel placement keeps
one copy of the state dict in shared memory guarded by a lock, plus a version counter the inference
workers poll before each forward pass (a single integer read while nothing changed).
"""
from __future__ import annotations

import torch
from torch import nn


class LocalPolicyStore:
    """Learner and inference worker hold the same module: publishing only bumps the version."""

    def __init__(self):
        self.version = 0

    def publish(self, model: nn.Module, version: int) -> None:
        self.version = version

    def maybe_load(self, model: nn.Module, current: int) -> int:
        return self.version


class SharedPolicyStore:
    def __init__(self, model: nn.Module, lock):
        self.params = {k: v.detach().to("cpu", copy=True).share_memory_() for k, v in model.state_dict().items()}
        self.version_t = torch.zeros(1, dtype=torch.int64).share_memory_()
        self.lock = lock

    @property
    def version(self) -> int:
        return int(self.version_t[0])

    def publish(self, model: nn.Module, version: int) -> None:
        self.publish_state(model.state_dict(), version)

    def publish_state(self, state: dict, version: int) -> None:
        """Weights as a state dict of tensors or numpy arrays (a node of a cluster receives them so)."""
        with torch.no_grad(), self.lock:
            for key, value in state.items():
                self.params[key].copy_(torch.as_tensor(value))
            self.version_t[0] = version

    def state(self) -> tuple[int, dict]:
        """(version, a copy of the published weights), read under the lock."""
        with self.lock:
            return int(self.version_t[0]), {key: value.clone() for key, value in self.params.items()}

    def maybe_load(self, model: nn.Module, current: int) -> int:
        """Load the published weights if they are newer than `current`; return the version now held."""
        if int(self.version_t[0]) == current:
            return current
        with self.lock:
            model.load_state_dict(self.params)
            return int(self.version_t[0])
