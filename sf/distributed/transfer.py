"""What crosses the network between a node agent and the driver, and how trajectories leave and enter the
shared buffers. Per-step traffic never does: only whole trajectories (in chunks), weights and control messages.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import ray
import ray.cloudpickle

from sf.envs.registry import RegistrySnapshot
from sf.runtime.messages import Message

if TYPE_CHECKING:  # the buffers' module imports torch, which a node agent's process must not wait for at its start
    from sf.model.factory import ModelFactory
    from sf.runtime.buffers import TrajectoryBuffers

OBS_PREFIX = "obs/"


@dataclass(frozen=True, slots=True)
class Chunk:
    """Finished trajectories of one policy, copied out of a node's buffers. It travels by value in the agent's reply:
    Ray sends a small reply inside the call's answer and puts a large one in the node's object store, from where the
    driver's `ray.get` pulls it, so neither side makes a `ray.put` and a round trip of its own for it."""

    seq: int
    policy_id: int
    count: int
    nbytes: int
    tensors: dict[str, np.ndarray]


@dataclass(frozen=True, slots=True)
class WeightsUpdate:
    policy_id: int
    version: int
    data: list  # [ObjectRef of the state dict (numpy arrays)], one per version for every node


@dataclass(slots=True)
class Reply:
    """An agent's answer to each `take`: new chunks, messages for the runner, the weight versions it runs."""

    chunks: list[Chunk] = field(default_factory=list)
    messages: list[tuple[str, Message]] = field(default_factory=list)  # (dest, message)
    versions: dict[int, int] = field(default_factory=dict)
    finished: int = 0  # trajectories its rollout workers have completed so far
    done: bool = False  # stopped: every process ended and its final trees are in `messages`


def clock_offset() -> float:
    """Wall clock minus monotonic clock of this machine: moves a `time.monotonic()` stamp to another machine
    (whose clocks NTP keeps in step with this one's wall clock)."""
    return time.time() - time.monotonic()


def pack(buffers: TrajectoryBuffers, slots: list[int]) -> dict[str, np.ndarray]:
    """Copy whole trajectories out of the buffers (numpy arrays travel through the object store without pickling)."""
    out = {key: array[slots] for key, array in buffers.np.items()}
    out.update({OBS_PREFIX + key: array[slots] for key, array in buffers.obs_np.items()})
    out["traj_time"] += clock_offset()  # wall clock on the way: each machine has its own monotonic clock
    return out


def unpack(buffers: TrajectoryBuffers, slots: list[int], tensors: dict[str, np.ndarray]) -> None:
    """Write trajectories received from a node into these buffers' `slots`."""
    for key, array in tensors.items():
        if key.startswith(OBS_PREFIX):
            buffers.obs_np[key[len(OBS_PREFIX) :]][slots] = array
        else:
            buffers.np[key][slots] = array
    buffers.np["traj_time"][slots] -= clock_offset()


def nbytes(tensors: dict[str, np.ndarray]) -> int:
    return sum(array.nbytes for array in tensors.values())


def state_to_numpy(params: dict) -> dict[str, np.ndarray]:
    return {key: tensor.detach().cpu().numpy().copy() for key, tensor in params.items()}


def put(value: Any) -> list:
    return [ray.put(value)]


class ByValue:
    """An env or model factory function that travels by value: a function defined in a training script's `__main__`
    can be imported neither by a node agent nor by the processes it starts."""

    def __init__(self, fn: Callable):
        self.fn = fn

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)

    def __reduce__(self):
        return _load, (ray.cloudpickle.dumps(self.fn),)


def _load(data: bytes) -> ByValue:
    return ByValue(ray.cloudpickle.loads(data))


def _portable(fn: Callable) -> Callable:
    return ByValue(fn) if getattr(fn, "__module__", None) == "__main__" else fn


def portable_registry(snapshot: RegistrySnapshot) -> RegistrySnapshot:
    def portable(factories: dict) -> dict:
        return {name: _portable(fn) for name, fn in factories.items()}

    return RegistrySnapshot(portable(snapshot.envs), portable(snapshot.vector_envs), snapshot.shm_names)


def portable_model_factory(factory: ModelFactory) -> bytes:
    """The factory pickled for a node, each function a training script's `__main__` defines sent by value. Bytes, so
    that the agent's spec loads without the model modules (and torch) they name; the agent loads them in `start`."""
    return ray.cloudpickle.dumps(
        replace(factory, **{f.name: _portable(getattr(factory, f.name)) for f in fields(factory)})
    )
