"""What a component process of a parallel run receives at its start: one typed object, the same whether the process
belongs to the run's own machine or to a Ray node's agent (which has no healing, hence no incarnations or spares)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sf.envs.registry import RegistrySnapshot
from sf.envs.spaces import EnvInfo
from sf.runner.settings import RunSettings
from sf.runtime.buffers import TrajectoryBuffers
from sf.supervision.incarnations import Incarnations


@dataclass
class ProcessContext:
    cfg: Any  # the run's flags, never changed after the start
    settings: RunSettings  # what the run resolved at its start (device, precision, inference placement)
    env_info: EnvInfo
    buffers: TrajectoryBuffers  # in shared memory
    stores: list  # each policy's `SharedPolicyStore`
    queues: dict[str, Any]  # component or queue name -> the faster-fifo queue it reads
    control: Any  # the stop flag and every process's heartbeat (`sf.supervision.shared_flags`)
    experiment_dir: str
    envs: RegistrySnapshot  # the env registry as the main process has it (a user's script registered envs there)
    models: Any  # the model factory's registrations, likewise (`sf.model.factory.model_factory_snapshot`)
    ledger: str  # the file that records the /dev/shm names the run makes (`sf.supervision.shm_names`)
    resume: dict[int, Path] = field(default_factory=dict)  # policy -> the checkpoint its learner continues from
    incarnations: Incarnations | None = None  # which life of each component is current (healing); None on Ray nodes
    spares: list = field(default_factory=list)  # fresh queues for restarted components (`sf.supervision.healer`)
