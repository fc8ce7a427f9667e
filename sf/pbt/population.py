"""Population-based training as an observer of the runner, with Sample Factory's flags and rules.

`PopulationBasedTraining.load(cfg, folder, default_shaping)` reads (or, on a first start, draws) each policy's
hyperparameters and reward shaping; registered on the runner, it sends them to the learners before they train
(`on_init`), and after every training iteration looks for policies due for a step: those that trained
`--pbt_period_env_steps` frames since their last one, once they have `--pbt_start_mutation`. A step follows
`selection.step` and `mutation.Perturbation`; a replacement is a weight copy the runner carries out between the
target's iterations (`sf.runner.policy_control`), and the target's new values are written and applied once it has
the weights. Every replacement and every mutation is one log line and a `pbt/` TensorBoard scalar of the policy;
summary.json gets a `population` section.
"""

from __future__ import annotations

import copy
import logging
import random
from functools import partial
from pathlib import Path

from sf.pbt import policy_files
from sf.pbt.mutation import Change, Perturbation, tuned
from sf.pbt.selection import Gaps, Step, step
from sf.runner.observers import AlgoObserver
from sf.runtime.messages import WeightsAdopted

log = logging.getLogger("sf")


class PopulationBasedTraining(AlgoObserver):
    def __init__(
        self,
        cfg,
        folder: Path,
        hyperparameters: list[dict],
        shaping: list[dict | None],
        default_shaping: dict | None,
        rng: random.Random,
    ):
        self.cfg = cfg
        self.folder = Path(folder)
        self.hyperparameters = hyperparameters  # policy -> its current values, every per-policy flag it sets
        self.shaping = shaping  # policy -> its reward shaping scheme (None: the env has none)
        self.default_shaping = default_shaping
        self.defaults = {name: getattr(cfg, name) for name in tuned(cfg)}
        self.perturbation = Perturbation.from_cfg(cfg)
        self.gaps = Gaps.from_cfg(cfg)
        self.rng = rng
        n = cfg.num_policies
        self.last_step: list[int | None] = [None] * n  # frames at each policy's last step
        self.replacements = [0] * n
        self.mutations = [0] * n
        self.sources: list[list[dict]] = [[] for _ in range(n)]  # each replacement: frames and the source
        self.objectives: list[float | None] = [None] * n  # at the last step
        self.runner = None
        self.warned: set[str] = set()

    @classmethod
    def load(cls, cfg, folder: Path, default_shaping: dict | None) -> PopulationBasedTraining:
        """Each policy's values from its files, or for a policy without them (and after --restart_behavior=restart):
        the flags' values, mutated once for every policy but 0 (Sample Factory's start). ConfigError for a file that
        cannot be read."""
        rng = random.Random(None if cfg.seed is None else cfg.seed * 7_919 + 31)
        perturbation, fresh = Perturbation.from_cfg(cfg), cfg.restart_behavior == "restart"
        defaults = {name: getattr(cfg, name) for name in tuned(cfg)}
        hyperparameters, shaping = [], []
        for p in range(cfg.num_policies):
            saved = None if fresh else policy_files.read_hyperparameters(folder, p)
            if saved is None:
                values = perturbation.values(defaults, defaults, rng)[0] if p > 0 else dict(defaults)
            else:
                values = {**defaults, **saved}
            hyperparameters.append(values)
            found, scheme = (False, None) if fresh else policy_files.read_shaping(folder, p)
            if not found:
                scheme = copy.deepcopy(default_shaping)
                if scheme is not None and p > 0:
                    scheme = perturbation.values(scheme, default_shaping, rng)[0]
            shaping.append(scheme)
        return cls(cfg, folder, hyperparameters, shaping, default_shaping, rng)

    # the observer's hooks -----------------------------------------------------------------------------------
    def on_init(self, runner) -> None:
        self.runner = runner
        runner.summary_sections["population"] = self.summary
        for p in range(self.cfg.num_policies):
            self._save(p)
            runner.control.set_hyperparameters(p, self.hyperparameters[p])
            if self.shaping[p] is not None:
                runner.control.set_reward_shaping(p, self.shaping[p])
        cfg = self.cfg
        log.info(
            "PBT: %d policies ranked by %s, a step every %s frames of a policy after %s; the worst %s replaced, "
            "hyperparameters in %s",
            cfg.num_policies,
            cfg.pbt_target_objective,
            f"{cfg.pbt_period_env_steps:,}",
            f"{cfg.pbt_start_mutation:,}",
            f"{cfg.pbt_replace_fraction:.0%}".replace("%", " %"),
            policy_files.cfg_file(self.folder, 0).name.replace("00", "<id>"),
        )
        if cfg.num_policies == 1:
            log.warning("--with_pbt=True with --num_policies=1: a population of one has no one to learn from")

    def on_training_step(self, runner, training_iteration_since_resume: int) -> None:
        cfg = self.cfg
        if cfg.num_policies < 2:
            return
        for p, frames in runner.env_steps.items():
            if self.last_step[p] is None:
                if p not in runner.progress.learners_ready:  # its frames so far are not known (a resumed run)
                    continue
                self.last_step[p] = frames - frames % cfg.pbt_period_env_steps  # where an uninterrupted run's fall
            if frames < cfg.pbt_start_mutation or runner.control.busy(p):
                continue
            if frames - self.last_step[p] > cfg.pbt_period_env_steps:
                self.last_step[p] = frames
                self._step(runner, p, frames)

    def extra_summaries(self, runner, policy_id: int, writer, env_steps: int) -> None:
        for key, value in self._scalars(policy_id).items():
            writer.add_scalar(key, value, env_steps)

    # a step ---------------------------------------------------------------------------------------------------
    def _step(self, runner, policy: int, frames: int) -> None:
        objectives = self._objectives(runner)
        if objectives is None:
            return
        self.objectives = list(objectives)
        decision = step(policy, objectives, self.cfg.pbt_replace_fraction, self.gaps, self.rng)
        if decision is None:  # among the best: left alone
            self._write_scalars(runner, policy, frames)
            return
        values = dict(self.hyperparameters[decision.source])
        shaping = copy.deepcopy(self.shaping[decision.source])
        changes: list[Change] = []
        if decision.mutate:
            tuned_values = {key: values[key] for key in self.defaults}
            mutated, changes = self.perturbation.values(tuned_values, self.defaults, self.rng)
            values.update(mutated)
            if shaping is not None:
                shaping, more = self.perturbation.values(
                    shaping, self.default_shaping or {}, self.rng, "reward_shaping/"
                )
                changes += more
        if decision.replaced:
            name, source = self.cfg.pbt_target_objective, decision.source
            log.info(
                "PBT: policy %d (%s %.3f) takes policy %d's weights, optimizer state and hyperparameters (%s %.3f) "
                "at %s frames",
                policy,
                name,
                objectives[policy],
                source,
                name,
                objectives[source],
                f"{frames:,}",
            )
            done = partial(self._adopted, runner, decision, frames, values, shaping, changes)
            runner.control.copy_weights(source, policy, values, done)
        else:
            runner.control.set_hyperparameters(policy, values)
            self._settle(runner, policy, frames, values, shaping, changes)

    def _adopted(
        self,
        runner,
        decision: Step,
        frames: int,
        values: dict,
        shaping: dict | None,
        changes: list[Change],
        msg: WeightsAdopted,
    ) -> None:
        policy, source = decision.policy, decision.source
        if msg.error is not None:
            log.warning(
                "PBT: policy %d could not take policy %d's weights and keeps its own: %s", policy, source, msg.error
            )
            return
        self.replacements[policy] += 1
        self.sources[policy].append({"frames": frames, "source": source, "version": msg.version})
        log.debug("PBT: policy %d trains on from policy %d's weights as version %d", policy, source, msg.version)
        self._settle(runner, policy, frames, values, shaping, changes)

    def _settle(
        self, runner, policy: int, frames: int, values: dict, shaping: dict | None, changes: list[Change]
    ) -> None:
        """The policy's new values are in force: into its files, the envs' shaping, the log and TensorBoard."""
        self.hyperparameters[policy] = values
        self.shaping[policy] = shaping
        self._save(policy)
        if shaping is not None:
            runner.control.set_reward_shaping(policy, shaping)
        if changes:
            self.mutations[policy] += len(changes)
            log.info(
                "PBT: policy %d mutates %s",
                policy,
                ", ".join(f"{c.name} {_number(c.old)} -> {_number(c.new)}" for c in changes),
            )
        self._write_scalars(runner, policy, frames)

    def _objectives(self, runner) -> list[float] | None:
        """Each policy's mean objective over its last --stats_avg episodes; None (said once) while a policy has no
        episode or no episode reports the objective."""
        name = self.cfg.pbt_target_objective
        stats = runner.policy_avg_stats
        if name not in stats:
            if name not in self.warned:
                self.warned.add(name)
                log.warning(
                    "--pbt_target_objective=%s: no episode reports it, so no policy is replaced or mutated yet; the "
                    "episodes report: %s",
                    name,
                    ", ".join(stats),
                )
            return None
        per_policy = stats[name]
        if any(len(values) == 0 for values in per_policy):
            return None
        return [sum(values) / len(values) for values in per_policy]

    # outputs --------------------------------------------------------------------------------------------------
    def _save(self, policy: int) -> None:
        policy_files.write(self.folder, policy, self.hyperparameters[policy], self.shaping[policy])

    def _scalars(self, policy: int) -> dict[str, float]:
        scalars = {f"pbt/{key}": float(value) for key, value in self.hyperparameters[policy].items()}
        for key, value in _leaves(self.shaping[policy] or {}, "pbt/reward_shaping/"):
            scalars[key] = value
        scalars["pbt/replacements"] = float(self.replacements[policy])
        scalars["pbt/mutations"] = float(self.mutations[policy])
        if self.objectives[policy] is not None:
            scalars["pbt/objective"] = float(self.objectives[policy])
        return scalars

    def _write_scalars(self, runner, policy: int, frames: int) -> None:
        runner.experiment.write_scalars(policy, frames, self._scalars(policy))

    def summary(self) -> dict:
        """summary.json's `population`: each policy's objective now (its last --stats_avg episodes), its rank, its
        values and what PBT did to it."""
        runner = self.runner
        name = self.cfg.pbt_target_objective
        stats = runner.policy_avg_stats.get(name) if runner is not None else None
        now = [sum(v) / len(v) if v else None for v in stats] if stats is not None else [None] * len(self.mutations)
        known = [(value, p) for p, value in enumerate(now) if value is not None]
        rank = {p: r for r, (_, p) in enumerate(sorted(known, reverse=True), start=1)}
        return {
            "target_objective": name,
            "policies": {
                p: {
                    "objective": now[p],
                    "rank": rank.get(p),
                    "hyperparameters": self.hyperparameters[p],
                    "reward_shaping": self.shaping[p],
                    "replacements": self.sources[p],
                    "mutations": self.mutations[p],
                }
                for p in range(self.cfg.num_policies)
            },
        }


def _leaves(tree: dict, prefix: str):
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from _leaves(value, f"{prefix}{key}/")
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                if isinstance(item, (int, float)):
                    yield f"{prefix}{key}_{i}", float(item)
        elif isinstance(value, (int, float)):
            yield f"{prefix}{key}", float(value)


def _number(value) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)
