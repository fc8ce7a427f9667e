"""Component roles and names: a name is a message address and the label of a profile tree, printed at exit as
`<name> profile tree view:` in the order `profile_order` gives (docs/timing.md, "How a run uses it").

Every layer that needs to know what kind of component a name stands for asks `role_of` here: the profiling
selection (`--profiling_worker_groups`), the report, the timeline and the breakdown.
"""

from __future__ import annotations

from enum import Enum


class Role(str, Enum):
    """What a component does; its value is the prefix of every name of that role (and a profiling worker group)."""

    ROLLOUT_WORKER = "RolloutWorker"
    INFERENCE_WORKER = "InferenceWorker"
    BATCHER = "Batcher"
    LEARNER = "Learner"
    RUNNER = "Runner"
    NODE_AGENT = "NodeAgent"  # a Ray node's agent (--backend=ray); not a profiling worker group

    def __str__(self) -> str:
        return self.value


# the contract order of the printed trees, and the groups `--profiling_worker_groups` accepts
PROFILE_ORDER = (Role.BATCHER, Role.INFERENCE_WORKER, Role.LEARNER, Role.ROLLOUT_WORKER, Role.RUNNER)
WORKER_GROUPS = (Role.ROLLOUT_WORKER, Role.INFERENCE_WORKER, Role.BATCHER, Role.LEARNER, Role.RUNNER)

RUNNER = Role.RUNNER.value


def rollout_worker_name(worker_idx: int) -> str:
    return f"{Role.ROLLOUT_WORKER.value}_w{worker_idx}"


def inference_worker_name(policy_id: int, worker_idx: int) -> str:
    return f"{Role.INFERENCE_WORKER.value}_p{policy_id}-w{worker_idx}"


def policy_queue_name(policy_id: int) -> str:
    """Address shared by all inference workers of one policy: whichever is free takes the request."""
    return f"policy_p{policy_id}"


def batcher_name(policy_id: int) -> str:
    return f"{Role.BATCHER.value} {policy_id}"


def learner_name(policy_id: int) -> str:
    return f"{Role.LEARNER.value} {policy_id}"


def node_agent_name(index: int) -> str:
    return f"{Role.NODE_AGENT.value}_{index}"


def role_of(name: str) -> Role | None:
    """The role a component name belongs to; None for a name no component of sf carries."""
    return next((role for role in Role if name.startswith(role.value)), None)


def profile_order(name: str) -> tuple:
    """Contract order of the printed trees: Batcher, InferenceWorker, Learner, RolloutWorker, then Runner."""
    role = role_of(name)
    kind = PROFILE_ORDER.index(role) if role in PROFILE_ORDER else len(PROFILE_ORDER)
    digits = [int(part) for part in "".join(c if c.isdigit() else " " for c in name).split()]
    return (kind, digits, name)
