"""A run's policies, read from its summary.json: each one's learner, frames and objective (population-based
training's `--pbt_target_objective` when the run had a population, else the true objective), its rank and what
population-based training did to it. The report, the breakdown and `sf.profile top` show them for runs of several
policies.
"""

from __future__ import annotations

from dataclasses import dataclass

from sf.utils.roles import learner_name


@dataclass
class PolicyLine:
    policy: int
    learner: str
    frames: int
    objective: str  # the statistic ranked by
    value: float | None  # its mean over the policy's last episodes
    rank: int | None  # 1: the best
    replacements: int = 0  # times it took another policy's weights
    mutations: int = 0  # values population-based training mutated

    def text(self) -> str:
        value = "no episode yet" if self.value is None else f"{self.objective} {self.value:.4g} (rank {self.rank})"
        line = f"policy {self.policy}: {self.learner}, {self.frames:,} frames, {value}"
        done = [f"took another policy's weights {self.replacements}x"] if self.replacements else []
        done += [f"{self.mutations} value{'s' if self.mutations > 1 else ''} mutated"] if self.mutations else []
        return line + "; " + ", ".join(done) if done else line


def policy_lines(summary: dict) -> list[PolicyLine]:
    """One line per policy, best first (then by id); empty for a run of one policy."""
    frames = summary.get("env_frames") or {}
    if len(frames) < 2:
        return []
    population = summary.get("population") or {}
    entries = population.get("policies") or {}
    objective = population.get("target_objective", "true_objective")
    values = {str(p): entry.get("objective") for p, entry in entries.items()} or {
        str(p): value for p, value in (summary.get("avg_true_objective") or {}).items()
    }
    known = sorted(((v, p) for p, v in values.items() if v is not None), key=lambda vp: (-vp[0], int(vp[1])))
    rank = {p: r for r, (_, p) in enumerate(known, start=1)}
    lines = [
        PolicyLine(
            int(p),
            learner_name(int(p)),
            int(frames[p]),
            objective,
            values.get(str(p)),
            rank.get(str(p)),
            len((entries.get(str(p)) or {}).get("replacements", [])),
            int((entries.get(str(p)) or {}).get("mutations", 0)),
        )
        for p in frames
    ]
    return sorted(lines, key=lambda line: (line.rank is None, line.rank or 0, line.policy))
