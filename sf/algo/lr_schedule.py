"""Learning-rate schedules selected by `--lr_schedule` (Sample Factory's names and semantics)."""

from __future__ import annotations

SCHEDULES = ("constant", "linear_decay", "kl_adaptive_minibatch", "kl_adaptive_epoch")


class LearningRateSchedule:
    """`value(sgd_steps, kl)` returns the learning rate to use next, after `sgd_steps` optimizer steps in all.

    `linear_decay` is Sample Factory 2.1.1's: the rate falls linearly with the SGD steps taken and reaches zero after
    `train_for_env_steps // batch_size * num_epochs` of them, the number a run of `train_for_env_steps` samples
    makes. Env frames count frameskip and samples do not, so with `--env_frameskip=k` a run that stops at
    `train_for_env_steps` frames has taken 1/k of those steps and ends at `1 - 1/k` of the starting rate (3/4 with
    Atari's frameskip of 4).

    The KL-adaptive schedules are stateful: each call with a measured KL nudges the rate by a factor 1.5
    (down when kl > 2 * threshold, up when kl < threshold / 2) inside [lr_adaptive_min, lr_adaptive_max];
    a call without a KL returns the current rate. The learner decides how often to call (per minibatch or epoch).
    """

    def __init__(self, cfg):
        if cfg.lr_schedule not in SCHEDULES:
            raise ValueError(f"--lr_schedule={cfg.lr_schedule!r} is not one of {', '.join(SCHEDULES)}")
        self.kind = cfg.lr_schedule
        self.initial_lr = float(cfg.learning_rate)
        self.lr = self.initial_lr
        self.decay_steps = max(1, cfg.train_for_env_steps // cfg.batch_size * cfg.num_epochs)
        if self.kind.startswith("kl_adaptive"):
            self.kl_threshold = cfg.lr_schedule_kl_threshold
            self.min_lr, self.max_lr = cfg.lr_adaptive_min, cfg.lr_adaptive_max

    def set_base(self, lr: float) -> None:
        """A new `--learning_rate` (population-based training): the constant rate, the linear decay's start. The
        KL-adaptive schedules go on from the rate they reached, as Sample Factory's learner does."""
        self.initial_lr = float(lr)
        if self.kind == "constant":
            self.lr = self.initial_lr

    @property
    def per_sgd_step(self) -> bool:
        """Whether the rate moves after every optimizer step (else once per epoch, or never)."""
        return self.kind in ("linear_decay", "kl_adaptive_minibatch")

    def value(self, sgd_steps: int, kl: float | None = None) -> float:
        if self.kind == "linear_decay":
            self.lr = self.initial_lr * max(0.0, 1.0 - sgd_steps / self.decay_steps)
        elif self.kind != "constant" and kl is not None:
            if kl > 2.0 * self.kl_threshold:
                self.lr = max(self.lr / 1.5, self.min_lr)
            elif kl < 0.5 * self.kl_threshold:
                self.lr = min(self.lr * 1.5, self.max_lr)
        return self.lr
