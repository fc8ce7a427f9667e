"""The learner's weights on their way to other nodes: one `ray.put` per new version, shared by every node.

A version is put only when a node asks for newer weights than it holds, and a node asks only when its previous
update has been applied (at most one in flight per node), so a learner that publishes faster than the nodes
take its weights costs one put per version the nodes actually receive.
"""

from __future__ import annotations

import threading

from sf.distributed.transfer import WeightsUpdate, put, state_to_numpy
from sf.runtime.policy_store import SharedPolicyStore


class WeightsPublisher:
    def __init__(self, stores: list[SharedPolicyStore]):
        self.stores = stores
        self.lock = threading.Lock()
        self.latest: dict[int, WeightsUpdate] = {}
        self.puts = 0

    def newer_than(self, policy_id: int, version: int) -> WeightsUpdate | None:
        """The newest weights of `policy_id` if they are newer than `version` (put now if not put yet)."""
        store = self.stores[policy_id]
        if store.version <= version and policy_id in self.latest:
            return None
        with self.lock:
            update = self.latest.get(policy_id)
            if update is None or update.version != store.version:
                published, params = store.state()
                update = WeightsUpdate(policy_id, published, put(state_to_numpy(params)))
                self.latest[policy_id] = update
                self.puts += 1
        return update if update.version > version else None
