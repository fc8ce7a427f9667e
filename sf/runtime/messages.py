"""Every message the components exchange: one small typed class per kind, and `WIRING`, the one table of who sends
what to whom and which method of the receiver handles it (Sample Factory's `connect_components`, as data).

A component sends `self.send(dest, Kind(...))`; the receiver's handler gets the message object and reads its fields
by name. A wrong payload fails where it is built, and a reader sees in one place what travels between components.
`Component.__init__` binds its handlers from `WIRING` by the component's role, so a new kind is one class here, one
row in the table and one handler method; tests/test_messages.py checks the table against the components and
docs/architecture.md (its message table is printed by `python docs/gen_messages.py`).

The classes are NamedTuples: immutable, a field read by name costs what an index does, and a handler gets one
object instead of an unpacked payload. Pickled as they are, though, each would carry its class's import path and be
rebuilt through it, several times a plain tuple's round trip; so what crosses a process's queue is the wire form
`(dest, code, fields)`, builtins only, made by `encode` and read back by `decode` (about 0.2 us each). Every put on
and get from a run's queues goes through these two.

With `--profiling_timeline=True` the event loop wraps each message in a `Flow` (not a kind: an envelope carrying
the timeline's flow id); readers outside the loop take the message out with `unwrap`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from sf.utils.roles import Role

BATCHER, INFERENCE, LEARNER, NODE_AGENT, ROLLOUT, RUNNER = (
    Role.BATCHER,
    Role.INFERENCE_WORKER,
    Role.LEARNER,
    Role.NODE_AGENT,
    Role.ROLLOUT_WORKER,
    Role.RUNNER,
)
COMPONENT_PROCESSES = (ROLLOUT, INFERENCE, BATCHER, LEARNER)  # what shares a process's loop, minus the runner


# sampling -------------------------------------------------------------------------------------------------------
class PolicyRequest(NamedTuple):
    """RolloutWorker -> InferenceWorker (the address `policy_p<i>` its policy's workers share): the observations of
    one split's envs are in the buffers at these slots and steps; compute their actions. `incarnation`: the worker's
    incarnation (a request of one that died is dropped, `sf.supervision.incarnations`); `seq`: the request's number,
    which the answer carries back (a request sent again after an inference worker's restart is answered once)."""

    worker: int
    split: int
    slots: list[int]
    steps: list[int]
    incarnation: int = 0
    seq: int = 0


class Actions(NamedTuple):
    """InferenceWorker -> RolloutWorker: actions for these splits of the worker are in the buffers; step them. One
    message names every split served in one forward pass (a queue put costs more than its bytes); `seqs` are the
    requests' numbers, split by split."""

    splits: list[int]
    policy_id: int
    seqs: list[int] = []


class Trajectories(NamedTuple):
    """RolloutWorker -> Batcher: these slots hold finished trajectories. On a Ray node the NodeAgent takes them in the
    batcher's place and ships copies; the driver's link writes those into free slots and sends this to the batcher.
    `worker` and `incarnation`: the sender and its life, whose trajectories are dropped once it was restarted (-1:
    slots a link filled, which no restart here touches)."""

    slots: list[int]
    worker: int = -1
    incarnation: int = 0


class Release(NamedTuple):
    """Batcher -> RolloutWorker: these slots were copied into a batch (or dropped as too old) and may be filled again.
    On a Ray node its NodeAgent sends it once the driver has the chunk; the driver's link keeps the batcher's release
    of a remote worker's slots for the next chunk."""

    slots: list[int]


class PolicyVersion(NamedTuple):
    """Learner -> RolloutWorker, with `--async_rl=False`: the version its envs wait for is published; collect the
    next batch with it. A NodeAgent holds it back until its node has that version's weights."""

    policy_id: int
    version: int


class TrainingInfo(NamedTuple):
    """Runner -> RolloutWorker, with each progress line: the frames each policy's learner has trained on, for the envs
    that implement Sample Factory's `TrainingInfoInterface` (`sf.envs.training_info`), and each policy's reward
    shaping (set by population-based training) for those with its `RewardShapingInterface`."""

    env_steps: dict[int, int]
    reward_shaping: dict[int, dict | None] = {}


# training -------------------------------------------------------------------------------------------------------
class Train(NamedTuple):
    """Batcher -> Learner: a training batch copied out of the buffers, the env frames collected since the last one
    and the trajectories dropped for their policy lag."""

    batch: dict
    new_frames: int
    dropped: int


class LearnerVersion(NamedTuple):
    """Learner -> Batcher: the version just published, against which the batcher measures trajectories' policy lag."""

    version: int


class Save(NamedTuple):
    """Runner -> Learner: write a checkpoint now (every `--save_every_sec`)."""


class SaveBest(NamedTuple):
    """Runner -> Learner: the policy's average `metric`; keep the weights as the best policy when it beats the best."""

    metric: str
    value: float


class Hyperparameters(NamedTuple):
    """Runner -> Learner: train with these values from the next iteration on (flag name -> value, among
    `sf.runtime.learner.PER_POLICY_HYPERPARAMETERS`); population-based training sets each policy's own."""

    values: dict


class ShareWeights(NamedTuple):
    """Runner -> Learner: save a checkpoint now, for another policy to take these weights from; answered with
    `WeightsSaved`."""


class WeightsSaved(NamedTuple):
    """Learner -> Runner: the checkpoint `ShareWeights` asked for is written, whole, at `path`."""

    policy_id: int
    path: str
    version: int


class AdoptWeights(NamedTuple):
    """Runner -> Learner: between two iterations, take the weights and optimizer state of policy `source`'s checkpoint
    at `path` and train on with `hyperparameters`; experience collected before is masked out (the version jumps by
    `--max_policy_lag` + 1, as in Sample Factory). Answered with `WeightsAdopted`."""

    source: int
    path: str
    hyperparameters: dict


class WeightsAdopted(NamedTuple):
    """Learner -> Runner: the policy trains on from `source`'s weights since `version` (its own checkpoint of them
    saved); `error` names why it kept its own weights instead (the checkpoint did not load), else None."""

    policy_id: int
    source: int
    version: int
    error: str | None


# what the runner is told ----------------------------------------------------------------------------------------
class LearnerStats(NamedTuple):
    """Learner -> Runner: after each batch (and at start), the frames trained on, the version and the losses."""

    policy_id: int
    env_steps: int
    version: int
    stats: dict


class Staleness(NamedTuple):
    """Learner -> Runner: histograms of the batch's trajectory ages and policy lags, for the progress line and the
    summary."""

    policy_id: int
    ages: dict[int, int]
    lags: dict[int, int]


class Episodes(NamedTuple):
    """RolloutWorker -> Runner: the episodes finished since the last report, each (return, length, true objective or
    None, extra stats or None) (`sf.envs.episodes.EpisodeRecord`)."""

    policy_id: int
    episodes: list[tuple]


class ProfileSnapshot(NamedTuple):
    """Every component's process (the serial loop for every component but the runner) -> Runner: a component's
    Timing tree, its process's resources and its work/wait split so far, for the live feed, the series and
    TensorBoard."""

    component: str
    pid: int
    tree: dict
    resources: dict | None
    activity: dict | None


class FinalProfile(NamedTuple):
    """Every component process and node agent -> Runner, at exit: the same as `ProfileSnapshot`, final; the runner
    prints it and writes it into profile.json, and stops waiting for the process once its final trees are in."""

    component: str
    pid: int
    tree: dict
    resources: dict | None
    activity: dict | None


class ComponentError(NamedTuple):
    """A component process, a node agent or its link -> Runner: `component` failed with this traceback; the run
    stops with status "error"."""

    component: str
    traceback: str


class NodeStats(NamedTuple):
    """NodeAgent -> Runner (its link adds the driver's side on the way): the node's transfer counts."""

    agent: str
    stats: dict


class NodeRestarted(NamedTuple):
    """A NodeAgent's link on the driver -> Runner: the node's agent was lost and is started again."""

    agent: str
    node: str
    cause: str
    frames_lost: int
    restarts_left: int


class ProfilerOutputs(NamedTuple):
    """NodeAgent -> its link on the driver, at exit: the files its node's processes wrote under the profiling folder
    (path relative to it -> bytes), for the driver's folder."""

    agent: str
    files: dict[str, bytes]


# the wiring -----------------------------------------------------------------------------------------------------
class Wire(NamedTuple):
    """Who sends a kind, who receives it and the receiver's method that handles it."""

    senders: tuple[Role, ...]
    receiver: Role
    handler: str


WIRING: dict[type, Wire] = {
    PolicyRequest: Wire((ROLLOUT,), INFERENCE, "_on_request"),
    Actions: Wire((INFERENCE,), ROLLOUT, "_on_actions"),
    Trajectories: Wire((ROLLOUT, NODE_AGENT), BATCHER, "_on_trajectories"),
    Release: Wire((BATCHER, NODE_AGENT), ROLLOUT, "_on_release"),
    PolicyVersion: Wire((LEARNER,), ROLLOUT, "_on_version"),
    TrainingInfo: Wire((RUNNER,), ROLLOUT, "_on_training_info"),
    Train: Wire((BATCHER,), LEARNER, "_on_train"),
    LearnerVersion: Wire((LEARNER,), BATCHER, "_on_learner_version"),
    Save: Wire((RUNNER,), LEARNER, "_on_save"),
    SaveBest: Wire((RUNNER,), LEARNER, "_on_save_best"),
    Hyperparameters: Wire((RUNNER,), LEARNER, "_on_hyperparameters"),
    ShareWeights: Wire((RUNNER,), LEARNER, "_on_share_weights"),
    AdoptWeights: Wire((RUNNER,), LEARNER, "_on_adopt_weights"),
    WeightsSaved: Wire((LEARNER,), RUNNER, "_on_weights_saved"),
    WeightsAdopted: Wire((LEARNER,), RUNNER, "_on_weights_adopted"),
    LearnerStats: Wire((LEARNER,), RUNNER, "_on_learner_stats"),
    Staleness: Wire((LEARNER,), RUNNER, "_on_staleness"),
    Episodes: Wire((ROLLOUT,), RUNNER, "_on_episodes"),
    ProfileSnapshot: Wire((*COMPONENT_PROCESSES, NODE_AGENT), RUNNER, "_on_snapshot"),
    FinalProfile: Wire((*COMPONENT_PROCESSES, NODE_AGENT), RUNNER, "_on_final_profile"),
    ComponentError: Wire((*COMPONENT_PROCESSES, NODE_AGENT), RUNNER, "_on_error"),
    NodeStats: Wire((NODE_AGENT,), RUNNER, "_on_node_stats"),
    NodeRestarted: Wire((NODE_AGENT,), RUNNER, "_on_node_restarted"),
    ProfilerOutputs: Wire((NODE_AGENT,), NODE_AGENT, "_on_profiler_outputs"),
}

Message = tuple  # an instance of one of WIRING's kinds


def handlers_for(receiver: Any) -> dict[type, Any]:
    """The receiver's handler of every kind WIRING sends to its `role`, by kind."""
    return {kind: getattr(receiver, wire.handler) for kind, wire in WIRING.items() if wire.receiver is receiver.role}


# the timeline's envelope ----------------------------------------------------------------------------------------
class Flow(NamedTuple):
    """A message sent by a traced event loop: the flow id links its send and its delivery on the timeline."""

    flow_id: int
    message: Message


def unwrap(msg: Message) -> Message:
    """The message inside a `Flow`, or the message itself."""
    return msg.message if type(msg) is Flow else msg


# the wire form --------------------------------------------------------------------------------------------------
KINDS: tuple[type, ...] = (*WIRING, Flow)  # a kind's wire code is its index here
_CODE = {kind: code for code, kind in enumerate(KINDS)}
_FLOW = _CODE[Flow]
_new = tuple.__new__  # a NamedTuple from its fields, without a Python call


def encode(dest: str, msg: Message) -> tuple:
    """What a queue carries for `msg` to `dest`: `(dest, code, fields)`, nothing but builtins to pickle."""
    kind = type(msg)
    if kind is not Flow:
        return dest, _CODE[kind], tuple(msg)
    inner = msg.message
    return dest, _FLOW, (msg.flow_id, _CODE[type(inner)], tuple(inner))


def decode(wire: tuple) -> tuple[str, Message]:
    """`(dest, message)` from what `encode` made."""
    dest, code, fields = wire
    if code != _FLOW:
        return dest, _new(KINDS[code], fields)
    flow_id, code, fields = fields
    return dest, Flow(flow_id, _new(KINDS[code], fields))
