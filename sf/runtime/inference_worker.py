"""The policy step: gather the observations of every pending request, one forward pass, write actions,
log-probs, values and next RNN states straight into the trajectory buffers, tell each worker its split is ready.
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from sf.model.factory import custom_model_parts
from sf.model.mlp_kernel import MlpPolicyKernel, seed_sampling
from sf.runtime.buffers import TrajectoryBuffers
from sf.runtime.event_loop import Component
from sf.runtime.messages import Actions, PolicyRequest
from sf.utils.roles import Role, inference_worker_name, rollout_worker_name

log = logging.getLogger("sf")


class InferenceWorker(Component):
    role = Role.INFERENCE_WORKER
    wait_key = "wait_requests"

    def __init__(
        self,
        cfg,
        policy_id: int,
        worker_idx: int,
        buffers: TrajectoryBuffers,
        model,
        policy_store,
        device: str,
        incarnations=None,
    ):
        """`incarnations`: each rollout worker's life (`sf.supervision.incarnations`); a request of an older one, whose
        worker died, is not served."""
        super().__init__(inference_worker_name(policy_id, worker_idx))
        self.cfg = cfg
        self.incarnations = incarnations
        self.policy_id = policy_id
        self.buffers = buffers
        self.model = model
        self.store = policy_store
        self.device = torch.device(device)
        self.version = -1
        self.requests: list[PolicyRequest] = []
        T = cfg.rollout
        n = buffers.layout.num_slots
        self.T = T
        self.obs_flat = {k: v.view(n * (T + 1), *v.shape[2:]) for k, v in buffers.obs.items()}
        t = buffers.tensors
        self.rnn_flat = t["rnn_states"].view(n * (T + 1), -1)
        self.values_flat = t["values"].view(-1)
        self.actions_flat = t["actions"].view(n * T, -1)
        self.log_prob_flat = t["log_prob"].view(-1)
        self.logits_flat = t["action_logits"].view(n * T, -1)
        self.version_flat = t["policy_version"].view(-1)
        self.use_rnn = buffers.layout.rnn_state_size > 0
        self.kernel = _kernel(cfg, model, self.device)
        custom = custom_model_parts(model)
        if custom and cfg.mlp_inference_kernel and policy_id == 0 and worker_idx == 0:  # one of these per run
            log.info(
                "the numba MLP inference kernel steps aside for the custom model (%s): inference runs in torch",
                ", ".join(custom),
            )
        if self.kernel is not None:
            self.obs_np_flat, self.out_np = _kernel_views(buffers, T)
            self.kernel.compile(self.obs_np_flat, T, self.out_np)  # while the process starts, not mid-run

    def on_start(self) -> None:
        self.model.eval()
        if self.kernel is not None:  # the kernel draws from its own stream, seeded from this process's torch seed
            with self.timing.add_time("init"):  # the first call loads the compiled kernels: up to a second
                seed_sampling(torch.initial_seed() % 2**32)

    def _on_request(self, msg: PolicyRequest) -> None:
        self.requests.append(msg)

    def forget_worker(self, worker: int) -> None:
        self.requests = [request for request in self.requests if request.worker != worker]

    def forget_requests(self, policy_id: int) -> None:
        if policy_id == self.policy_id:
            self.requests = []

    def flush(self) -> None:
        if not self.requests:
            return
        requests, self.requests = self.requests, []
        if self.incarnations is not None:
            current = self.incarnations.of
            requests = [request for request in requests if request.incarnation == current[request.worker]]
            if not requests:
                return
        timing = self.timing
        with timing.add_time("update_model"):
            self.version = self.store.maybe_load(self.model, self.version)
        if self.kernel is not None:
            self._kernel_step(requests)
            return
        with timing.add_time("one_step"), timing.add_time("handle_policy_step"), torch.no_grad():
            with timing.add_time("deserialize"):
                slots, steps = _slots_and_steps(requests)
                slots_t = torch.tensor(slots, dtype=torch.int64)
                steps_t = torch.tensor(steps, dtype=torch.int64)
                idx_obs = slots_t * (self.T + 1) + steps_t
                idx_step = slots_t * self.T + steps_t
            with timing.add_time("stack"):
                obs = {k: v.index_select(0, idx_obs) for k, v in self.obs_flat.items()}
                rnn = self.rnn_flat.index_select(0, idx_obs) if self.use_rnn else None
            with timing.add_time("obs_to_device_normalize"):
                if self.device.type != "cpu":
                    obs = {k: v.to(self.device, non_blocking=True) for k, v in obs.items()}
                    rnn = rnn.to(self.device, non_blocking=True) if rnn is not None else None
                obs = self.model.normalize_obs(obs)
            with timing.add_time("forward"), self.model.parts_timed_by(timing):
                out = self.model.policy_step(obs, rnn)
            with timing.add_time("prepare_outputs"):
                with timing.add_time("to_cpu"):
                    actions, log_prob, values = out.actions.cpu(), out.log_prob.cpu(), out.values.cpu()
                    action_logits = out.action_logits.cpu()
                    new_rnn = out.new_rnn_states.cpu() if self.use_rnn else None
                self.actions_flat.index_copy_(0, idx_step, actions)
                self.log_prob_flat.index_copy_(0, idx_step, log_prob)
                self.logits_flat.index_copy_(0, idx_step, action_logits)
                self.values_flat.index_copy_(0, idx_obs, values)
                self.version_flat.index_fill_(0, idx_step, self.version)
                if new_rnn is not None:
                    self.rnn_flat.index_copy_(0, idx_obs + 1, new_rnn)
            with timing.add_time("send_messages"):
                self._send_actions(requests)

    def _send_actions(self, requests: list[PolicyRequest]) -> None:
        """One message per rollout worker naming every split of it served here: a queue put wakes the worker and
        costs far more than its bytes, and both splits of a worker are often in one call."""
        served: dict[int, tuple[list[int], list[int]]] = {}
        for request in requests:
            splits, seqs = served.setdefault(request.worker, ([], []))
            splits.append(request.split)
            seqs.append(request.seq)
        for worker, (splits, seqs) in served.items():
            self.send(rollout_worker_name(worker), Actions(splits, self.policy_id, seqs))

    def _kernel_step(self, requests: list[PolicyRequest]) -> None:
        """The same step for a small MLP policy, as one numba call over the buffers (`sf.model.mlp_kernel`)."""
        timing = self.timing
        with timing.add_time("one_step"), timing.add_time("handle_policy_step"):
            with timing.add_time("deserialize"):
                slots, steps = _slots_and_steps(requests)
                slots_np = np.array(slots, dtype=np.int64)
                steps_np = np.array(steps, dtype=np.int64)
            with timing.add_time("forward"):
                self.kernel.step(self.obs_np_flat, slots_np, steps_np, self.T, self.version, self.out_np)
            with timing.add_time("send_messages"):
                self._send_actions(requests)


def _slots_and_steps(requests: list[PolicyRequest]) -> tuple[list[int], list[int]]:
    """Every requested (trajectory slot, step), in request order: the rows this batch reads and writes."""
    slots, steps = [], []
    for request in requests:
        slots += request.slots
        steps += request.steps
    return slots, steps


def _kernel(cfg, model, device: torch.device) -> MlpPolicyKernel | None:
    return MlpPolicyKernel.of(model) if cfg.mlp_inference_kernel and device.type == "cpu" else None


def _kernel_views(buffers: TrajectoryBuffers, rollout: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The flat numpy views of the buffers that the kernel reads (observations) and writes (the rest)."""
    n = buffers.layout.num_slots
    (obs_np,) = buffers.obs_np.values()
    return obs_np.reshape(n * (rollout + 1), -1), {
        "actions": buffers.np["actions"].reshape(n * rollout, -1),
        "log_prob": buffers.np["log_prob"].reshape(-1),
        "action_logits": buffers.np["action_logits"].reshape(n * rollout, -1),
        "values": buffers.np["values"].reshape(-1),
        "policy_version": buffers.np["policy_version"].reshape(-1),
    }


def compile_policy_kernel(cfg, model, buffers: TrajectoryBuffers, device: str) -> None:
    """In the main process, before any component starts: compile the numba step for these buffers, or load it from
    numba's cache. A first compile takes 15-20 s on a busy 2-core machine; inside a component it would leave that
    process unable to stop or beat for as long, so that a stop or a short --heartbeat_timeout_sec killed it before the
    compile ended and reached the cache, run after run. Here it is written to the cache once, and every component
    loads it in well under a second."""
    kernel = _kernel(cfg, model, torch.device(device))
    if kernel is not None:
        obs, out = _kernel_views(buffers, cfg.rollout)
        kernel.compile(obs, cfg.rollout, out)
