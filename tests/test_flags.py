"""Every flag `--help` lists either does something or is refused: no flag is silently ignored."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import pkgutil
import re
import subprocess

import pytest
from conftest import ROOT

import sf_examples
from sf.cfg.arguments import make_parser, parse_full_cfg
from sf.cfg.unsupported import UNSUPPORTED
from sf.utils.errors import ConfigError

# flags the parser consumes itself while building the config
READ_BY_THE_PARSER = {"cfg": "names the YAML file whose keys are layered under the command line"}
# code that may mention a flag without making it do anything
NOT_A_READER = {"sf/cfg/validate.py", "sf/cfg/unsupported.py"}


def _example_modules() -> list:
    modules = []
    for info in pkgutil.walk_packages(sf_examples.__path__, "sf_examples."):
        try:
            modules.append(importlib.import_module(info.name))
        except ImportError:  # an example whose optional extra is not installed: its flags are not in this parser
            continue
    return modules


def _all_flags(modules: list) -> list[str]:
    """The flags of the training and evaluation parser plus every `add_*_args` an example defines."""
    parser = make_parser(evaluation=True)
    for module in modules:
        for name, fn in vars(module).items():
            if re.fullmatch(r"add_\w+_args", name) and callable(fn) and fn.__module__ == module.__name__:
                fn(parser)
    return [
        action.dest
        for action in parser._actions
        if action.option_strings and not isinstance(action, argparse._HelpAction)
    ]


def _fields_read_from_cfg(modules: list) -> set[str]:
    """Fields of dataclasses whose `from_cfg` reads each field by name from the config (e.g. DoomEnvOptions)."""
    names = set()
    for module in modules:
        for _, cls in inspect.getmembers(module, inspect.isclass):
            from_cfg = getattr(cls, "from_cfg", None)
            if dataclasses.is_dataclass(cls) and from_cfg and "getattr(cfg, f.name" in inspect.getsource(from_cfg):
                names |= {field.name for field in dataclasses.fields(cls)}
    return names


def _source() -> str:
    files = [path for folder in ("sf", "sf_examples") for path in (ROOT / folder).rglob("*.py")]
    return "\n".join(path.read_text() for path in files if str(path.relative_to(ROOT)) not in NOT_A_READER)


def test_every_flag_is_read_by_the_code_or_refused():
    modules = _example_modules()
    flags = _all_flags(modules)
    source = _source()
    by_field = _fields_read_from_cfg(modules)

    def read(name: str) -> bool:
        pattern = rf"\bcfg[\"'\]]*\.{name}\b|getattr\(\s*\w*cfg\w*\s*,\s*[\"']{name}[\"']"
        return name in by_field or name in READ_BY_THE_PARSER or re.search(pattern, source) is not None

    inert = [name for name in flags if not read(name) and name not in UNSUPPORTED]
    assert not inert, f"flags neither read by the code nor listed in sf/cfg/unsupported.py: {inert}"
    read_and_refused = [name for name in UNSUPPORTED if read(name)]
    assert not read_and_refused, f"flags listed as unsupported but read by the code: {read_and_refused}"
    assert set(UNSUPPORTED) <= set(flags)


def _other_value(accepted):
    if isinstance(accepted, bool):
        return str(not accepted)
    if isinstance(accepted, int):
        return str(accepted + 7)
    if isinstance(accepted, list):
        return "0"
    return "something_else"


@pytest.mark.parametrize("name", sorted(UNSUPPORTED))
def test_an_unsupported_flag_is_refused_with_what_to_do_and_accepted_with_the_value_sf_honours(name):
    evaluation = name == "no_render"
    with pytest.raises(ConfigError) as info:
        parse_full_cfg(
            ["--env=CartPole-v1", f"--{name}", _other_value(UNSUPPORTED[name].accepted)], evaluation=evaluation
        )
    assert info.value.flag == f"--{name}"
    assert str(info.value).startswith(f"--{name}=") and UNSUPPORTED[name].instead in str(info.value)
    assert getattr(parse_full_cfg(["--env=CartPole-v1"], evaluation=evaluation), name) == UNSUPPORTED[name].accepted


def test_refused_flag_exits_with_status_2_and_one_line():
    result = subprocess.run(
        [
            *_python(),
            "-m",
            "sf_examples.train_gym_env",
            "--env=CartPole-v1",
            "--optimizer=lamb",
            "--train_dir=/nonexistent/never_created",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "--optimizer=lamb is not supported" in result.stderr


def _python() -> list[str]:
    import sys

    return [sys.executable]


# the repository describes commands and results by what they are, never by the work item or session behind them
SELF_REFERENCE = "|".join(["iss" + "ue [0-9]+", "the iss" + "ue's", "le" + "nt", "this ta" + "sk"])


def test_the_repository_speaks_of_itself():
    paths = [p for p in ("README.md", "docs", "tests", "benchmarks", "sf", "sf_examples") if (ROOT / p).exists()]
    result = subprocess.run(["grep", "-rniwE", SELF_REFERENCE, *paths], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 1, result.stdout  # grep: 1 means no line matched


def test_documents_the_code_points_at_are_in_the_repository():
    sources = [path.read_text() for path in [*(ROOT / "sf").rglob("*.py"), *(ROOT / "sf_examples").rglob("*.py")]]
    mentioned = {match for text in sources for match in re.findall(r"[A-Za-z0-9_./-]+\.md\b", text)}
    # Markdown files a command writes (`out / "summary.md"`), and their mentions under the output folder's name
    written = {match for text in sources for match in re.findall(r'/ "([A-Za-z0-9_.-]+\.md)"', text)}
    mentioned = {name for name in mentioned if name.rsplit("/", 1)[-1] not in written}
    missing = sorted(name for name in mentioned if not (ROOT / name).is_file() and not (ROOT / "docs" / name).is_file())
    assert not missing, f"documents named in the code but not in the repository: {missing}"
