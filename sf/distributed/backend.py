"""`--backend=ray`: the parallel placement with rollout workers spread over a Ray cluster.

The driver's node runs the runner, the learners with their batchers, and its share of rollout workers (with
inference workers) as local processes, exactly as `--backend=local`; every other share runs under a node agent
(`sf.distributed.agent`) and reaches the batcher through a link (`sf.distributed.link`). With every worker on the
driver's node no agent starts and the run is the local one, with `node` in profile.json.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import replace
from pathlib import Path

import faster_fifo
import ray

from sf.distributed import cluster
from sf.distributed.agent import AgentSpec
from sf.distributed.link import LinkContext, NodeLink
from sf.distributed.placement import Placement, plan
from sf.distributed.transfer import portable_model_factory, portable_registry
from sf.distributed.weights import WeightsPublisher
from sf.envs.registry import registry_snapshot
from sf.model.factory import model_factory_snapshot
from sf.runner.process_context import ProcessContext
from sf.utils.roles import inference_worker_name, rollout_worker_name

log = logging.getLogger("sf")


class RayPlacement:
    """What the parallel placement asks of a cluster: which workers stay local, the routes and names of the remote
    ones, and the links that stand in for their processes."""

    def __init__(self, cfg, placement: Placement, driver: cluster.NodeInfo, colocated: bool):
        self.cfg = cfg
        self.colocated = colocated  # inference in each rollout worker's process (`RunSettings.colocated`)
        self.placement = placement
        self.driver = driver
        self.local_workers = placement.local_workers
        self.inboxes = {group.name: faster_fifo.Queue(4 * 1024 * 1024) for group in placement.groups}
        self.links: list[NodeLink] = []

    def routes(self) -> dict:
        """Messages for a remote rollout worker (slot releases, new versions) go to its node's link."""
        return {
            rollout_worker_name(w): self.inboxes[group.name] for group in self.placement.groups for w in group.workers
        }

    def component_names(self) -> set[str]:
        names = set()
        for group in self.placement.groups:
            names |= {group.name} | {rollout_worker_name(w) for w in group.workers}
            served = group.workers if self.colocated else self.inference_workers(group)
            names |= {inference_worker_name(p, i) for p in range(self.cfg.num_policies) for i in served}
        return names

    def inference_workers(self, group) -> tuple[int, ...]:
        """Indices of a node's inference worker processes: after the driver's, so every name in profile.json is
        unique; none where each rollout worker holds its own (named after the worker)."""
        if self.colocated:
            return ()
        n = self.cfg.policy_workers_per_policy
        k = self.placement.groups.index(group) + 1
        return tuple(range(k * n, (k + 1) * n))

    def start_links(self, process_ctx: ProcessContext, nodes: dict, grace_s) -> dict[str, NodeLink]:
        """A link per node group, each starting its node's agent with what the node's processes need."""
        ctx = LinkContext(
            self.cfg,
            self.colocated,
            process_ctx.buffers,
            process_ctx.queues,
            WeightsPublisher(process_ctx.stores),
            process_ctx.control,
            nodes,
            grace_s,
        )
        envs = portable_registry(registry_snapshot())
        models = portable_model_factory(model_factory_snapshot())
        # a node's processes run in another working directory: relative paths would land elsewhere
        remote_cfg = argparse.Namespace(**vars(self.cfg))
        remote_cfg.profiling = replace(self.cfg.profiling, output_dir=Path(self.cfg.profiling.output_dir).resolve())
        experiment_dir = str(Path(process_ctx.experiment_dir).resolve())
        for group in self.placement.groups:
            spec = AgentSpec(
                group.name,
                group.workers,
                self.inference_workers(group),
                remote_cfg,
                process_ctx.env_info,
                envs,
                experiment_dir,
                models,
                process_ctx.settings.inference_placement,
            )
            link = NodeLink(group, spec, self.inboxes[group.name], ctx)
            link.start()
            self.links.append(link)
        return {link.name: link for link in self.links}

    def close(self) -> None:
        for link in self.links:
            try:
                link.kill()
            except ray.exceptions.RayError:
                pass


def run_ray(cfg, experiment, env_info, settings, stop_event_local, resume=None, registrations=None) -> dict:
    from sf.runner.parallel import run_parallel

    started = cluster.connect(cfg.ray_address)
    placement = None
    try:
        driver = cluster.this_node()
        nodes = cluster.alive_nodes()
        planned = plan(cfg, nodes, driver.ray_node_id, cluster.custom_resources())
        placement = RayPlacement(cfg, planned, driver, settings.colocated)
        log.info(
            "Ray cluster of %d node(s); rollout workers %s on this node (%s)%s",
            len(nodes),
            list(placement.local_workers),
            driver.label,
            "".join(f", {list(g.workers)} under {g.name}" for g in placement.placement.groups),
        )
        return run_parallel(cfg, experiment, env_info, settings, stop_event_local, placement, resume, registrations)
    finally:
        if placement is not None:
            placement.close()
        if started:
            ray.shutdown()
