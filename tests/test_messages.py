"""The message kinds and their wiring: one table (`sf.runtime.messages.WIRING`) that the components' handlers, the
modules that send each kind, the wire form and docs/architecture.md all agree with; no message read by position."""

from __future__ import annotations

import pickle
import re
import sys

import pytest
from conftest import ROOT

from sf.runner.runner import Runner
from sf.runtime import messages
from sf.runtime.batcher import Batcher
from sf.runtime.event_loop import Component, EventLoop
from sf.runtime.inference_worker import InferenceWorker
from sf.runtime.learner import Learner
from sf.runtime.messages import (
    WIRING,
    Actions,
    Flow,
    PolicyRequest,
    ProfileSnapshot,
    Save,
    Train,
    decode,
    encode,
    handlers_for,
    unwrap,
)
from sf.runtime.rollout_worker import RolloutWorker
from sf.utils.roles import Role

sys.path.insert(0, str(ROOT / "docs"))
import gen_messages  # noqa: E402

COMPONENTS = (RolloutWorker, InferenceWorker, Batcher, Learner, Runner)
PROCESS_SENDERS = set(messages.COMPONENT_PROCESSES)  # a process's main code sends for the components on its loop
SENDER_MODULES = {  # which roles a module that builds a message may send it as
    "sf/runtime/rollout_worker.py": {Role.ROLLOUT_WORKER},
    "sf/runtime/inference_worker.py": {Role.INFERENCE_WORKER},
    "sf/runtime/batcher.py": {Role.BATCHER},
    "sf/runtime/learner.py": {Role.LEARNER},
    "sf/runner/runner.py": {Role.RUNNER},
    "sf/runner/policy_control.py": {Role.RUNNER},  # the runner's piece that steers the learners of a population
    "sf/runner/parallel.py": PROCESS_SENDERS,
    "sf/runner/serial.py": PROCESS_SENDERS,
    "sf/runner/sampling_api.py": {Role.BATCHER},  # the sampler's tap stands in the batcher's place
    "sf/distributed/agent.py": {Role.NODE_AGENT},
    "sf/distributed/link.py": {Role.NODE_AGENT},
}
EXAMPLES = {  # one message of each kind, with values of the types its fields carry
    messages.PolicyRequest: PolicyRequest(1, 0, [3, 4], [7, 0]),
    messages.Actions: Actions([0, 1], 2),
    messages.Trajectories: messages.Trajectories([5, 6]),
    messages.Release: messages.Release([5]),
    messages.PolicyVersion: messages.PolicyVersion(0, 9),
    messages.TrainingInfo: messages.TrainingInfo({0: 4096, 1: 2048}, {0: {"kill": 1.0}, 1: None}),
    messages.Train: Train({"rewards": [1.0]}, 2048, 3),
    messages.LearnerVersion: messages.LearnerVersion(4),
    messages.Save: Save(),
    messages.SaveBest: messages.SaveBest("reward", 1.5),
    messages.Hyperparameters: messages.Hyperparameters({"learning_rate": 1e-4, "gamma": 0.99}),
    messages.ShareWeights: messages.ShareWeights(),
    messages.WeightsSaved: messages.WeightsSaved(1, "/x/checkpoint_p1/checkpoint_000000012_4096.pth", 12),
    messages.AdoptWeights: messages.AdoptWeights(1, "/x/checkpoint_p1/checkpoint_000000012_4096.pth", {"gamma": 0.9}),
    messages.WeightsAdopted: messages.WeightsAdopted(2, 1, 1013, None),
    messages.LearnerStats: messages.LearnerStats(0, 1000, 3, {"loss": 0.5}),
    messages.Staleness: messages.Staleness(0, {1: 2}, {0: 5}),
    messages.Episodes: messages.Episodes(1, [(1.0, 10, None, None), (2.0, 5, 1.5, {"coins": 3.0})]),
    messages.ProfileSnapshot: ProfileSnapshot("Learner 0", 12, {"train": {"time": 1.0, "children": {}}}, None, {}),
    messages.FinalProfile: messages.FinalProfile("Batcher 0", 12, {}, {"wall_s": 2.0}, None),
    messages.ComponentError: messages.ComponentError("Learner 0", "Traceback ...\nValueError: x"),
    messages.NodeStats: messages.NodeStats("NodeAgent_1", {"chunks_sent": 3}),
    messages.NodeRestarted: messages.NodeRestarted("NodeAgent_1", "host (ab12)", "lost", 2048, 1),
    messages.ProfilerOutputs: messages.ProfilerOutputs("NodeAgent_1", {"a/b.txt": b"x"}),
}


def _sf_sources() -> dict[str, str]:
    return {str(p.relative_to(ROOT)): p.read_text() for p in sorted((ROOT / "sf").rglob("*.py"))}


def test_every_kind_is_wired_and_documented_by_its_docstring():
    declared = {
        value for value in vars(messages).values() if isinstance(value, type) and value.__module__ == messages.__name__
    }
    assert declared - set(WIRING) == {Flow, messages.Wire}  # the envelope and the table's row are not kinds
    for kind, wire in WIRING.items():
        assert set(kind._fields) == set(kind.__annotations__), kind  # a NamedTuple: typed fields only
        opening = " ".join(kind.__doc__.split()).split(": ", 1)[0]
        sender_text, arrow, receiver_text = opening.partition(" -> ")
        assert arrow, f"{kind.__name__}'s docstring must open with `sender -> receiver:`"
        assert wire.receiver.value in receiver_text or "link" in receiver_text, kind
        assert sender_text, kind


def test_each_component_gets_a_handler_for_every_kind_it_receives():
    for cls in COMPONENTS:
        kinds = {kind for kind, wire in WIRING.items() if wire.receiver is cls.role}
        assert kinds, cls
        for kind in kinds:
            handler = getattr(cls, WIRING[kind].handler)
            assert list(handler.__code__.co_varnames[:2]) == ["self", "msg"], (cls, kind)  # it takes the message
    roles = {cls.role for cls in COMPONENTS}
    for kind, wire in WIRING.items():
        assert wire.receiver in roles or wire.receiver is Role.NODE_AGENT, kind


def test_the_node_agents_driver_side_handles_what_is_sent_to_it():
    pytest.importorskip("ray")
    from sf.distributed.link import NodeLink

    for kind, wire in WIRING.items():
        if wire.receiver is Role.NODE_AGENT:
            assert callable(getattr(NodeLink, wire.handler)), kind


def test_every_kind_is_sent_only_from_the_modules_of_its_senders():
    sources = _sf_sources()
    for kind, wire in WIRING.items():
        builders = [path for path, text in sources.items() if re.search(rf"\b{kind.__name__}\(", text)]
        builders.remove("sf/runtime/messages.py")
        assert builders, f"{kind.__name__} is never sent"
        for path in builders:
            assert SENDER_MODULES[path] & set(wire.senders), (kind.__name__, path)


def test_no_message_is_read_by_position_or_sent_by_a_kind_name():
    positional = re.compile(r"\b(msg|msgs|m|wire|delivery|envelope|payload)\[")
    string_kind = re.compile(r"""\.send\([^,()]+,\s*["']|handlers\[["']""")
    found = [
        f"{path}:{number}: {line.strip()}"
        for path, text in _sf_sources().items()
        for number, line in enumerate(text.splitlines(), 1)
        if positional.search(line) or string_kind.search(line)
    ]
    assert found == []


def test_a_component_without_a_role_gets_no_handlers_and_one_with_a_role_gets_the_tables():
    assert handlers_for(Component("sink")) == {}

    class Receiver(Component):
        role = Role.BATCHER

        def _on_trajectories(self, msg):
            self.got = msg

        def _on_learner_version(self, msg):
            self.got = msg

    receiver = Receiver("Batcher 0")
    assert set(receiver.handlers) == {messages.Trajectories, messages.LearnerVersion}
    loop = EventLoop()
    loop.add(receiver)
    loop.send("Batcher 0", messages.LearnerVersion(3))
    dest, msg = loop.local.popleft()
    loop._dispatch(loop.components[dest], msg)
    assert receiver.got == messages.LearnerVersion(version=3)


@pytest.mark.parametrize("kind", list(WIRING), ids=lambda kind: kind.__name__)
def test_the_wire_form_is_builtins_only_and_gives_the_same_message_back(kind):
    msg = EXAMPLES[kind]
    assert type(msg) is kind
    for sent in (msg, Flow(77, msg)):
        data = pickle.dumps(encode("Learner 0", sent), protocol=pickle.HIGHEST_PROTOCOL)
        assert b"sf.runtime" not in data and kind.__name__.encode() not in data  # no class travels by name
        dest, received = decode(pickle.loads(data))
        assert dest == "Learner 0" and type(received) is type(sent) and received == sent
        assert type(unwrap(received)) is kind and unwrap(received) == msg


def test_the_architecture_page_holds_the_generated_message_table():
    page = (ROOT / "docs" / "architecture.md").read_text()
    assert gen_messages.table() in page, "run `python docs/gen_messages.py` and paste its table into the page"
