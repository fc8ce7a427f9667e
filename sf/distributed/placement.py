"""Which rollout workers run on which node: the driver's node runs its share as local processes, every other
share gets a node agent. Pure functions of the flags and the cluster's nodes, so they are tested without Ray."""

from __future__ import annotations

from dataclasses import dataclass

from sf.cfg.validate import parse_worker_groups
from sf.utils.errors import ConfigError
from sf.utils.roles import node_agent_name


@dataclass(frozen=True)
class WorkerGroup:
    """Consecutive rollout workers run by one node agent, on a given node or on one offering a custom resource."""

    name: str
    workers: tuple[int, ...]
    node_id: str | None = None
    resource: str | None = None


@dataclass(frozen=True)
class Placement:
    local_workers: tuple[int, ...]
    groups: tuple[WorkerGroup, ...]


def plan(cfg, nodes: list[str], driver_node: str, resources: set[str]) -> Placement:
    """Pinned groups first (`--ray_worker_groups`), then the remaining workers over `nodes`, the driver's first:
    `--ray_workers_per_node` each, or as evenly as possible."""
    groups: list[WorkerGroup] = []
    next_worker = 0
    for resource, count in parse_worker_groups(cfg.ray_worker_groups):
        if resource not in resources:
            raise ConfigError(
                f"--ray_worker_groups: no node of the cluster offers the resource {resource!r} "
                f"(it has: {', '.join(sorted(resources)) or 'none'})",
                flag="--ray_worker_groups",
            )
        workers = tuple(range(next_worker, next_worker + count))
        groups.append(WorkerGroup(node_agent_name(len(groups) + 1), workers, resource=resource))
        next_worker += count
    order = [driver_node] + [n for n in nodes if n != driver_node]
    rest = cfg.num_workers - next_worker
    if cfg.ray_workers_per_node > 0:
        counts = [min(cfg.ray_workers_per_node, max(0, rest - i * cfg.ray_workers_per_node)) for i in range(len(order))]
        if sum(counts) < rest:
            raise ConfigError(
                f"--ray_workers_per_node={cfg.ray_workers_per_node}: {len(order)} node(s) hold "
                f"{sum(counts)} of the {rest} rollout workers to spread",
                flag="--ray_workers_per_node",
            )
    else:
        base, extra = divmod(rest, len(order))
        counts = [base + (1 if i < extra else 0) for i in range(len(order))]
    local: tuple[int, ...] = ()
    for node, count in zip(order, counts):
        workers = tuple(range(next_worker, next_worker + count))
        next_worker += count
        if node == driver_node:
            local = workers
        elif workers:
            groups.append(WorkerGroup(node_agent_name(len(groups) + 1), workers, node_id=node))
    return Placement(local, tuple(groups))
