"""The docs a newcomer walks: every page reachable from docs/index.md and the mkdocs nav, every link to a page or
file pointing at one that exists, and the README short, with a package map that matches the folders."""

from __future__ import annotations

import re

import pytest
import yaml
from conftest import ROOT

DOCS = ROOT / "docs"
PAGES = sorted(p.name for p in DOCS.glob("*.md"))
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _nav_pages(nav) -> list[str]:
    pages = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += _nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_index_links_every_page():
    linked = set(LINK.findall((DOCS / "index.md").read_text()))
    assert sorted(set(PAGES) - {"index.md"} - linked) == []


def test_mkdocs_nav_lists_every_page_once():
    nav = _nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])
    assert sorted(nav) == PAGES


def test_links_to_pages_and_files_exist():
    missing = []
    for page in [ROOT / "README.md", ROOT / "benchmarks" / "README.md", *(DOCS / name for name in PAGES)]:
        for target in LINK.findall(page.read_text()):
            if "://" not in target and not (page.parent / target).exists():
                missing.append(f"{page.relative_to(ROOT)}: {target}")
    assert missing == []


def test_readme_is_short_and_its_package_map_matches_the_folders():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 120 and len(readme) < 6000  # a door: every detail one link away
    mapped = set(re.findall(r"^\| `(sf/[a-z_]+)/` \|", readme, re.M))
    packages = {f"sf/{p.parent.name}" for p in (ROOT / "sf").glob("*/__init__.py")}
    assert mapped == packages
    for folder in re.findall(r"^\| `([a-z_]+)/` \|", readme, re.M):
        assert (ROOT / folder).is_dir(), folder
    entry_points = re.search(r"^\| `sf/\*\.py` \| entry points: (.*) \|$", readme, re.M).group(1)
    assert sorted(re.findall(r"`([a-z_]+\.py)`", entry_points)) == sorted(
        p.name for p in (ROOT / "sf").glob("*.py") if p.name != "__init__.py"
    )


NOT_IN_MAKE = ["brax"]  # declared and documented, left out of `make`'s default: JAX and MJX are large


def test_the_extras_the_docs_list_are_the_ones_make_installs():
    makefile_extras = re.search(r"^EXTRAS \?= (\S+)$", (ROOT / "Makefile").read_text(), re.M).group(1).split(",")
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    install = re.search(
        r"installs sf in editable mode with its extras\s*\(([^)]*)\)", (DOCS / "getting-started.md").read_text()
    )
    listed = re.findall(r"`([a-z]+)`", install.group(1))
    readme = re.search(r"Extras: (.*)\.$", (ROOT / "README.md").read_text(), re.M).group(1)
    assert sorted(listed) == sorted([*makefile_extras, *NOT_IN_MAKE]) == sorted(declared)
    assert sorted(re.findall(r"`([a-z]+)`", readme)) == sorted(declared)


WALK = [ROOT / "README.md", DOCS / "getting-started.md"]  # what a newcomer runs, in this order
SCRIPT = re.compile(r"^python -m (sf_examples\.[\w.]+)((?: +\S+)*)")


def _walk_commands() -> list[tuple[str, str, list[str]]]:
    """(page, module, flags) of every example-script command in the bash blocks of the walk, in order."""
    found = []
    for page in WALK:
        for block in re.findall(r"^```bash\n(.*?)^```", page.read_text(), re.S | re.M):
            for line in block.replace("\\\n", " ").splitlines():
                match = SCRIPT.match(line.split("#", 1)[0].strip())
                if match:
                    found.append((page.name, match.group(1), match.group(2).split()))
    return found


def test_the_walk_trains_each_experiment_once_and_evaluates_what_it_trained():
    """README then getting-started, every command as written: each training command parses and starts an experiment
    no earlier command trained (else it would find it finished and train nothing), and each evaluation names one the
    walk trained."""
    from sf.envs.families import families

    by_module = {f.train_module: (f, False) for f in families()} | {f.enjoy_module: (f, True) for f in families()}
    trained: list[str] = []
    commands = _walk_commands()
    assert len(commands) >= 6
    for page, module, flags in commands:
        family, evaluation = by_module[module]
        cfg = family.parse_cfg(flags, evaluation=evaluation)
        name = f"{cfg.train_dir}/{cfg.experiment}"
        if evaluation:
            assert name in trained, f"{page}: {module} evaluates {name}, which no command before it trained"
        else:
            assert name not in trained or cfg.restart_behavior != "resume", f"{page}: {name} is trained twice"
            trained.append(name)


def test_the_docs_name_only_the_restart_behaviors_the_program_has():
    from sf.cfg.arguments import make_parser

    choices = next(a.metavar for a in make_parser()._actions if a.dest == "restart_behavior").strip("{}").split(",")
    named = {
        value
        for page in [ROOT / "README.md", *(DOCS / name for name in PAGES)]
        for value in re.findall(r"--restart_behavior=(\w+)", page.read_text())
    }
    assert named and named <= set(choices), named - set(choices)
