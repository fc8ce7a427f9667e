"""Print the flag reference of docs/configuration.md as Markdown, straight from the parser, so the page
cannot drift from the code: `python docs/gen_flags.py > /tmp/flags.md`, then paste it under "Flag reference".

One table per argument group of `sf.cfg.arguments.make_parser(evaluation=True)`, then the flags that
`sf_examples.vizdoom.doom_envs.add_doom_args` adds for the VizDoom scripts, `sf.envs.pettingzoo_env` for the
PettingZoo one, `sf_examples.tensor_envs.tensor_envs` for the tensor envs and `sf_examples.brax.brax_envs` for Brax.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable

from sf.cfg.arguments import make_parser, str2bool
from sf.envs.pettingzoo_env import add_pettingzoo_args
from sf_examples.brax.brax_envs import add_brax_args
from sf_examples.tensor_envs.tensor_envs import add_tensor_env_args
from sf_examples.vizdoom.doom_envs import add_doom_args

# Defaults computed from the machine the script runs on would make the page differ per machine.
MACHINE_DEPENDENT = {"num_workers": "CPU cores"}

EVALUATION_GROUP = "evaluation"
DOOM_TITLE = "VizDoom (train_vizdoom, enjoy_vizdoom)"
PETTINGZOO_TITLE = "PettingZoo (train_pettingzoo)"
TENSOR_TITLE = "Tensor envs (train_tensor_env, enjoy_tensor_env)"
BRAX_TITLE = "Brax (train_brax, enjoy_brax)"

_METAVAR_TYPES = {"BOOL": "bool", "INT": "int", "FLOAT": "float", "STR": "str"}  # how sf's own flags are declared
_PARSER_TYPES = {str2bool: "bool", int: "int", float: "float"}  # flags added by examples, without a metavar
_FLAG_MENTION = re.compile(r"(--[a-z][a-z0-9_]*(?:=[^\s,;)]+)?)")


def value_type(action: argparse.Action) -> str:
    """`bool`, `int`, `float`, `str`, `one of ...` (choices) or `list of ...` (flags taking several values)."""
    if action.metavar and str(action.metavar).startswith("{"):
        choices = str(action.metavar).strip("{}").split(",")
        return "one of " + ", ".join(f"`{choice}`" for choice in choices)
    name = _METAVAR_TYPES.get(str(action.metavar)) or _PARSER_TYPES.get(action.type, "str")
    return f"list of {name}" if action.nargs in ("*", "+") else name


def default_text(action: argparse.Action) -> str:
    if action.dest in MACHINE_DEPENDENT:
        return MACHINE_DEPENDENT[action.dest]
    default = action.default
    if default is None:
        return "unset"
    if isinstance(default, list):
        return "`[" + ", ".join(str(item) for item in default) + "]`"
    if isinstance(default, float) and (abs(default) >= 1e5 or 0 < abs(default) < 1e-3):
        return f"`{default:g}`"
    if isinstance(default, int) and not isinstance(default, bool) and abs(default) >= 100_000:
        return f"`{default:_}`"
    return f"`{default}`"


def cell(text: str) -> str:
    """Help text as one table cell: flag names in code spans, nothing Markdown would read as markup."""
    parts = _FLAG_MENTION.split(text)
    out = []
    for i, part in enumerate(parts):
        if i % 2:
            out.append(f"`{part}`")
        else:
            out.append(
                part.replace("\\", "\\\\")
                .replace("|", "\\|")
                .replace("*", "\\*")
                .replace("<", "&lt;")
                .replace(">", "&gt;")
            )
    return "".join(out)


def table(actions: Iterable[argparse.Action]) -> list[str]:
    lines = ["| flag | type | default | meaning |", "| --- | --- | --- | --- |"]
    for action in actions:
        lines.append(
            f"| `{action.option_strings[0]}` | {value_type(action)} | {default_text(action)} | "
            f"{cell(action.help or '')} |"
        )
    return lines


def _is_flag(action: argparse.Action) -> bool:
    return bool(action.option_strings) and not isinstance(action, argparse._HelpAction)


def reference() -> str:
    parser = make_parser(evaluation=True)
    known = {a.dest for a in parser._actions}
    sections: list[str] = []
    for group in parser._action_groups:
        actions = [a for a in group._group_actions if _is_flag(a)]
        if not actions:
            continue
        title = group.title
        if title == EVALUATION_GROUP:
            title += " (enjoy scripts only)"
        sections += [f"### {title}", "", *table(actions), ""]
    families = (
        (DOOM_TITLE, add_doom_args),
        (PETTINGZOO_TITLE, add_pettingzoo_args),
        (TENSOR_TITLE, add_tensor_env_args),
        (BRAX_TITLE, add_brax_args),
    )
    for title, add_args in families:
        family_parser = make_parser(add_args=add_args)
        family = [a for a in family_parser._actions if _is_flag(a) and a.dest not in known]
        sections += [f"### {title}", "", *table(family), ""]
    return "\n".join(sections).rstrip("\n")


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    print(reference())
