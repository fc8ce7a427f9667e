"""When the runner acts and why it stops: the periods of its timers from the flags, and the stop status that ends in
summary.json."""

from __future__ import annotations

from dataclasses import dataclass

REPORT_EVERY_S = 5.0
TRAIN_SCALARS_EVERY_S = 1.0  # learner statistics reach TensorBoard as means over this interval
TIME_LIMIT_CHECK_S = 1.0


@dataclass(frozen=True)
class Schedule:
    """Seconds between the runner's periodic actions; None where the run does not do it at all."""

    report_s: float
    train_scalars_s: float
    timing_s: float  # own timing scalars: --experiment_summaries_interval
    time_limit_check_s: float
    save_s: float | None  # checkpoints: --save_every_sec, none in benchmark and sampling-only runs
    save_best_s: float | None  # best-policy offers: --save_best_every_sec, likewise

    @classmethod
    def from_cfg(cls, cfg) -> Schedule:
        saves = not (cfg.benchmark or cfg.sampling_only)
        return cls(
            report_s=REPORT_EVERY_S,
            train_scalars_s=TRAIN_SCALARS_EVERY_S,
            timing_s=cfg.experiment_summaries_interval,
            time_limit_check_s=TIME_LIMIT_CHECK_S,
            save_s=cfg.save_every_sec if saves else None,
            save_best_s=cfg.save_best_every_sec if saves else None,
        )


class StopRequest:
    """Why the run stops: the first reason given ("ok", "interrupted" or "error"), except that an error given later
    still wins, since a run that failed while stopping did not end as planned."""

    def __init__(self):
        self.status: str | None = None
        self.error: str | None = None

    def ask(self, status: str, error: str | None = None) -> None:
        if self.status is None or (status == "error" and self.status != "error"):
            self.status, self.error = status, error
