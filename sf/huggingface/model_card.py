"""The README.md of a pushed policy: the Hub's metadata (library, tags, the score as an evaluation result) and the
commands that download, evaluate and go on training it."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

import numpy as np
import yaml

TAGS = ["deep-reinforcement-learning", "reinforcement-learning", "sample-factory", "sf"]


@dataclass(frozen=True)
class Score:
    """The returns of the episodes enjoy played before the push, and the command that played them."""

    returns: list[float]
    command: str

    @property
    def text(self) -> str:
        return f"{np.mean(self.returns):.2f} +/- {np.std(self.returns):.2f}"


def command_line(module: str, cli_args: dict) -> str:
    """`python -m <module>` with the flags of a parsed command line, as the user could type them again."""
    words = ["python", "-m", module]
    for key, value in cli_args.items():
        if isinstance(value, (list, tuple)):
            words += [f"--{key}", *(str(v) for v in value)]
        else:
            words.append(f"--{key}={value}")
    return " ".join(shlex.quote(w) for w in words)


def model_card(env: str, repo_id: str, enjoy_module: str, train_module: str, score: Score | None) -> str:
    repo_name = repo_id.split("/")[1]
    metadata: dict = {"library_name": "sample-factory", "tags": TAGS}
    if score is not None:
        metadata["model-index"] = [
            {
                "name": "APPO",
                "results": [
                    {
                        "task": {"type": "reinforcement-learning", "name": "reinforcement-learning"},
                        "dataset": {"name": env, "type": env},
                        "metrics": [
                            {"type": "mean_reward", "value": score.text, "name": "mean_reward", "verified": False}
                        ],
                    }
                ],
            }
        ]
    lines = [
        "---",
        yaml.safe_dump(metadata, sort_keys=False).rstrip(),
        "---",
        "",
        f"An **APPO** policy trained on **{env}** with sf (Sample Factory's command lines, "
        "https://github.com/alex-petrenko/sample-factory).",
        "",
    ]
    if score is not None:
        lines += [
            f"Mean reward **{score.text}** over {len(score.returns)} episodes, evaluated with:",
            "",
            "```",
            score.command,
            "```",
            "",
        ]
    lines += [
        "## Download",
        "",
        "```",
        f"python -m sf.huggingface.load_from_hub -r {repo_id}",
        "```",
        "",
        "## Evaluate",
        "",
        "```",
        f"python -m {enjoy_module} --env={env} --train_dir=./train_dir --experiment={repo_name}",
        "```",
        "",
        "## Train on",
        "",
        "```",
        f"python -m {train_module} --env={env} --train_dir=./train_dir --experiment={repo_name} "
        "--restart_behavior=resume --train_for_env_steps=<more than it has trained>",
        "```",
        "",
    ]
    return "\n".join(lines)
