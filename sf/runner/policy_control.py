"""What the runner offers a layer above it to steer the learners of a population (`sf.pbt`): each policy's
hyperparameters, one policy's weights copied into another's learner, each policy's reward shaping.

Every request is a message the learner takes between two of its iterations, so the others train on meanwhile. A copy
is two steps: the source saves a checkpoint (`ShareWeights`, answered with `WeightsSaved`), then the target takes it
(`AdoptWeights`, answered with `WeightsAdopted`), whose answer goes to the callback the copy was asked with.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sf.runtime.messages import AdoptWeights, Hyperparameters, Message, ShareWeights, WeightsAdopted, WeightsSaved
from sf.utils.roles import learner_name

Send = Callable[[str, Message], None]


@dataclass
class Copy:
    """A copy of policy `source`'s weights into policy `target`'s learner, under way."""

    source: int
    target: int
    hyperparameters: dict
    on_done: Callable[[WeightsAdopted], None]
    path: str | None = None  # the source's checkpoint, once saved


@dataclass
class PolicyControl:
    """Requests to the learners and what is under way; the runner routes the learners' answers here."""

    send: Send
    copies: dict[int, Copy] = field(default_factory=dict)  # target -> its copy under way
    reward_shaping: dict[int, dict | None] = field(default_factory=dict)  # policy -> shaping (with TrainingInfo)

    def set_hyperparameters(self, policy_id: int, values: dict) -> None:
        self.send(learner_name(policy_id), Hyperparameters(dict(values)))

    def copy_weights(
        self, source: int, target: int, hyperparameters: dict, on_done: Callable[[WeightsAdopted], None]
    ) -> None:
        """`target` trains on from `source`'s current weights and optimizer state, with `hyperparameters`;
        `on_done` gets the target's answer. One copy into a policy at a time."""
        if target in self.copies:
            raise RuntimeError(f"policy {target} is already taking policy {self.copies[target].source}'s weights")
        if source == target:
            raise ValueError(f"policy {source} cannot take its own weights")
        self.copies[target] = Copy(source, target, dict(hyperparameters), on_done)
        self.send(learner_name(source), ShareWeights())

    def busy(self, policy_id: int) -> bool:
        """A copy into this policy is under way."""
        return policy_id in self.copies

    def on_saved(self, msg: WeightsSaved) -> None:
        """The source's checkpoint is written: every copy waiting for it goes to its target."""
        for copy in self.copies.values():
            if copy.source == msg.policy_id and copy.path is None:
                copy.path = msg.path
                self.send(learner_name(copy.target), AdoptWeights(copy.source, msg.path, copy.hyperparameters))

    def on_adopted(self, msg: WeightsAdopted) -> None:
        copy = self.copies.pop(msg.policy_id, None)
        if copy is not None:
            copy.on_done(msg)

    def set_reward_shaping(self, policy_id: int, shaping: dict | None) -> None:
        """The policy's envs take it at their next episode end, from the next TrainingInfo on."""
        self.reward_shaping[policy_id] = shaping
