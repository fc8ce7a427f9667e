"""Joining a Ray cluster and naming its nodes: the one module that calls `ray.init`."""

from __future__ import annotations

import socket
from dataclasses import dataclass

import ray

LOCAL_OBJECT_STORE_BYTES = 256 * 1024**2  # --ray_address=local: only weights travel through it


@dataclass(frozen=True)
class NodeInfo:
    """Where a component runs: written into its profile.json entry as `node`."""

    host: str
    ray_node_id: str

    def to_dict(self) -> dict:
        return {"host": self.host, "ray_node_id": self.ray_node_id}

    @property
    def label(self) -> str:
        return f"{self.host} ({self.ray_node_id[:8]})"


def connect(address: str) -> bool:
    """Join the cluster at `address` (auto, host:port) or start a one-machine one (local); True when this call
    started Ray, so the run shuts it down at the end."""
    if ray.is_initialized():
        return False
    if address == "local":
        ray.init(
            address="local",
            include_dashboard=False,
            object_store_memory=LOCAL_OBJECT_STORE_BYTES,
            configure_logging=False,
        )
    else:
        ray.init(address=address, configure_logging=False)
    return True


def this_node() -> NodeInfo:
    return NodeInfo(socket.gethostname(), ray.get_runtime_context().get_node_id())


def alive_nodes() -> list[str]:
    """Ids of the nodes that can run processes (alive, with CPUs), in the cluster's order."""
    return [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU", 0) > 0]


def custom_resources() -> set[str]:
    """Resource names nodes were started with beyond Ray's own (CPU, GPU, memory, node:<ip>, ...)."""
    builtin = ("CPU", "GPU", "memory", "object_store_memory", "accelerator_type:")
    names = set()
    for node in ray.nodes():
        if node["Alive"]:
            names |= {r for r in node["Resources"] if not r.startswith(builtin) and not r.startswith("node:")}
    return names
