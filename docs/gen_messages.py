"""Print the message table of docs/architecture.md ("Messages") from `sf.runtime.messages`, so the page cannot drift
from the code: `python docs/gen_messages.py`, then paste it under "Messages" (tests/test_messages.py checks the page
holds exactly this output).

One row per kind of `WIRING`, in its order: who sends it, who receives it, its fields, the receiver's handler and
the module that defines it, the modules that build it (read from the source, so a new sender shows up here), and
what the class's docstring says it means.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from sf.runtime.messages import WIRING

ROOT = Path(__file__).resolve().parent.parent
MESSAGES_MODULE = "sf/runtime/messages.py"


def sources() -> dict[str, str]:
    """Every module of sf/ but the messages module, by path relative to the repository."""
    paths = sorted((ROOT / "sf").rglob("*.py"))
    return {str(p.relative_to(ROOT)): p.read_text() for p in paths if str(p.relative_to(ROOT)) != MESSAGES_MODULE}


def builders(kind: type, code: dict[str, str]) -> list[str]:
    """Modules that build a `kind` (call its class)."""
    call = re.compile(rf"\b{kind.__name__}\(")
    return [path for path, text in code.items() if call.search(text)]


def handler_module(handler: str, code: dict[str, str]) -> str:
    definition = re.compile(rf"^\s+def {handler}\(self, msg\b", re.M)
    found = [path for path, text in code.items() if definition.search(text)]
    return found[0] if len(found) == 1 else "?"


def meaning(kind: type) -> str:
    """The docstring without its `sender -> receiver:` opening, on one line."""
    text = " ".join(kind.__doc__.split())
    return text.split(": ", 1)[1] if ": " in text else text


def short(path: str) -> str:
    return path.removeprefix("sf/runtime/").removeprefix("sf/")


def table() -> str:
    code = sources()
    lines = [
        "| kind | from | to | fields | handled by | sent in | what it says |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for kind, wire in WIRING.items():
        senders = ", ".join(role.value for role in wire.senders)
        fields = ", ".join(kind._fields) or "(none)"
        handler = f"`{wire.handler}` ({short(handler_module(wire.handler, code))})"
        sent_in = ", ".join(f"`{short(path)}`" for path in builders(kind, code))
        lines.append(
            f"| `{kind.__name__}` | {senders} | {wire.receiver.value} | {fields} | {handler} | {sent_in} | "
            f"{meaning(kind)} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(table())
