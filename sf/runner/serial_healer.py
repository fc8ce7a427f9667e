"""Healing in a serial run: a rollout worker whose env raised is replaced on the loop by a new one with fresh envs.

The parallel run's healer (`sf.supervision.healer`) restarts processes; here there is one process, so the failed
worker is closed, every component drops what it held of it, and a new worker takes its place on the event loop.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable

from sf.runtime.rollout_worker import RolloutWorker
from sf.supervision.healer import Restart, RestartBudget
from sf.supervision.incarnations import Incarnations
from sf.utils.errors import traceback_line

log = logging.getLogger("sf")


class SerialHealer:
    """The same in a serial run: a rollout worker whose env raised is replaced in the loop by a new one with fresh
    envs, after the batcher and the inference worker dropped what they held of it (`EventLoop.on_failure`). A call
    that never returns is the watchdog's (`sf.supervision.serial_watch`)."""

    def __init__(self, cfg, loop, incarnations: Incarnations, make_worker: Callable[[int], object]):
        """`make_worker(index)` builds rollout worker `index` of its current incarnation."""
        self.cfg = cfg
        self.loop = loop
        self.inc = incarnations
        self.make_worker = make_worker
        self.budget = RestartBudget(cfg.max_component_restarts)
        self.started = time.monotonic()
        self.done: list[Restart] = []

    def takes_error(self, component: str, report: str) -> bool:
        return False  # a serial run reports no errors by message

    def on_failure(self, component) -> bool:
        """In the failed handler's except clause: True when `component` was restarted and the loop goes on."""
        if not (self.cfg.restart_failed_components and isinstance(component, RolloutWorker)):
            return False
        cause = f"{component.name}: {traceback_line(traceback.format_exc())}"
        log.error("%s failed:\n%s", component.name, traceback.format_exc())
        failed = component
        while True:
            now = time.monotonic()
            if not self.budget.allows(failed.name, now):
                log.error(
                    "%s: not restarted: %d restart(s) within the last hour (--max_component_restarts)",
                    failed.name,
                    self.cfg.max_component_restarts,
                )
                return False
            self.budget.spend(failed.name, now)
            replacement = self._replace(failed)
            try:
                self.loop.start_component(replacement)
            except Exception:  # its envs would not start either: the next restart, within the allowance
                cause = f"{failed.name}: {traceback_line(traceback.format_exc())}"
                failed = replacement
                continue
            self.done.append(Restart(failed.name, cause, now - self.started))
            log.warning(
                "%s restarted with fresh envs after: %s (restart %d of at most %d an hour)",
                failed.name,
                cause,
                len(self.budget.times[failed.name]),
                self.cfg.max_component_restarts,
            )
            return True

    def _replace(self, old):
        """Close what is left of `old`, drop its work everywhere in the loop, put a new worker in its place."""
        try:
            old.on_stop()
        except Exception:  # an env whose engine is gone may not close: it goes with the old worker
            log.warning("%s: its envs did not close: %s", old.name, traceback_line(traceback.format_exc()))
        w = old.idx
        self.inc.worker[w] += 1
        for component in self.loop.components.values():
            component.forget_worker(w)
        self.loop.drop_local_messages_to(old.name)  # its releases and actions
        new = self.make_worker(w)
        self.loop.replace(old, new)
        return new

    def summary(self) -> dict:
        return {
            "component_restarts": [restart.to_dict() for restart in self.done],
            "trajectories_dropped_for_restarts": int(self.inc.dropped.sum()),
        }
