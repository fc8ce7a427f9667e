"""The profiling section: one dataclass built from the `--profiling_*` flags (or the `profiling:` YAML section,
which is the same keys without the prefix), validated once and handed to the launcher.

Nothing else reads the raw flags: the runners and the per-process hooks only see a `ProfilingConfig`.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sf.profiling.backends.catalog import BINARIES, NONE, WRAPPERS
from sf.utils.errors import ConfigError
from sf.utils.roles import WORKER_GROUPS, Role

GROUPS = tuple(role.value for role in WORKER_GROUPS)
YAML_SECTION = "profiling"


@dataclass(frozen=True)
class ProfilingConfig:
    backend: str = NONE
    """Which profiler; "none" profiles nothing, wraps nothing and creates no folder."""
    worker_groups: tuple[str, ...] = ()
    """Component kinds to profile (see GROUPS); empty profiles none."""
    steps: tuple[int, ...] = ()
    """Learner iterations to capture (1 is the first iteration, which produces policy version 1); empty = whole life."""
    output_dir: Path = Path("profiling")
    """Where every output lands: <train_dir>/<experiment>/profiling/ unless given."""
    options: dict[str, str] = field(default_factory=dict)
    """nsys profile options: one-letter key -> `-k value`, longer -> `--key=value`."""
    flags: tuple[str, ...] = ()
    """Bare nsys profile flags: `--flag` (or `-f` for one letter)."""
    args: dict[str, str] = field(default_factory=dict)
    """rocprof-sys-python arguments, rendered like `options`."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment of the profiled processes (rocprof-sys reads its settings from there); wins over derived values."""

    @property
    def enabled(self) -> bool:
        return self.backend != NONE and bool(self.worker_groups)

    def selects(self, group: str) -> bool:
        return self.enabled and group in self.worker_groups

    @property
    def wraps_processes(self) -> bool:
        """The profiler starts the process (nsys, rocprof-sys) rather than running inside or beside it."""
        return self.enabled and self.backend in WRAPPERS

    @property
    def windows(self) -> list[tuple[int, int]]:
        """Runs of consecutive steps, each one capture window: (3, 4, 5, 9) -> [(3, 5), (9, 9)]."""
        runs: list[tuple[int, int]] = []
        for step in sorted(set(self.steps)):
            if runs and step == runs[-1][1] + 1:
                runs[-1] = (runs[-1][0], step)
            else:
                runs.append((step, step))
        return runs


def binary_path(backend: str) -> str | None:
    """The profiler's executable: on PATH, else next to this interpreter (a virtual environment's bin/)."""
    name = BINARIES[backend]
    found = shutil.which(name)
    if found is None:
        beside = Path(sys.executable).parent / name
        found = str(beside) if beside.is_file() else None
    return found


def flatten_yaml_section(data: dict[str, Any]) -> dict[str, Any]:
    """`profiling: {backend: nsight, options: {t: cuda}}` -> `{profiling_backend: nsight, profiling_options: [t=cuda]}`.

    `enabled: false` (RLinf's master switch) keeps the rest of the section but profiles nothing.
    """
    section = data.get(YAML_SECTION)
    if section is None:
        return data
    if not isinstance(section, dict):
        raise ConfigError(f"--cfg: the '{YAML_SECTION}:' section must be a mapping of keys to values", flag="--cfg")
    flat = {k: v for k, v in data.items() if k != YAML_SECTION}
    section = dict(section)
    enabled = section.pop("enabled", True)
    for key, value in section.items():
        if isinstance(value, dict):
            value = [f"{k}={_text(v)}" for k, v in value.items()]
        flat[f"profiling_{key}"] = value
    if enabled is False or str(enabled).lower() == "false":
        flat["profiling_backend"] = NONE
    return flat


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _pairs(items: list[str] | None, flag: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--{flag}: expected key=value items, got {item!r}", flag=f"--{flag}")
        pairs[key.lstrip("-")] = value
    return pairs


def profiling_config(cfg) -> ProfilingConfig:
    """Build and validate the section from a parsed config; raises ConfigError naming the flag."""
    backend = cfg.profiling_backend or NONE
    groups = list(cfg.profiling_worker_groups or [])
    if "all" in groups:  # the runner is the process you launched: an external wrapper cannot start it
        groups = [g for g in GROUPS if not (backend in WRAPPERS and g == Role.RUNNER)]
    for group in groups:
        if group not in GROUPS:
            raise ConfigError(
                f"--profiling_worker_groups: unknown group {group!r} (choose from {', '.join(GROUPS)}, or all)",
                flag="--profiling_worker_groups",
            )
    steps = tuple(cfg.profiling_steps or ())
    if any(step < 1 for step in steps):
        raise ConfigError(
            f"--profiling_steps: learner iterations count from 1, got {min(steps)}", flag="--profiling_steps"
        )
    output_dir = (
        Path(cfg.profiling_output_dir)
        if cfg.profiling_output_dir
        else Path(cfg.train_dir) / cfg.experiment / "profiling"
    )
    pcfg = ProfilingConfig(
        backend=backend,
        worker_groups=tuple(dict.fromkeys(groups)),
        steps=steps,
        output_dir=output_dir,
        options=_pairs(cfg.profiling_options, "profiling_options"),
        flags=tuple(f.lstrip("-") for f in cfg.profiling_flags or ()),
        args=_pairs(cfg.profiling_args, "profiling_args"),
        env=_pairs(cfg.profiling_env, "profiling_env"),
    )
    if pcfg.enabled and backend in BINARIES and binary_path(backend) is None:
        raise ConfigError(
            f"--profiling_backend={backend}: `{BINARIES[backend]}` is not on PATH; install it or choose "
            "another backend",
            flag="--profiling_backend",
        )
    if pcfg.wraps_processes and cfg.serial_mode:
        raise ConfigError(
            f"--profiling_backend={backend}: serial mode runs in the process you launched; start it under "
            f"the profiler yourself (`{BINARIES[backend]} ... python -m ...`) or use --serial_mode=False",
            flag="--profiling_backend",
        )
    if pcfg.wraps_processes and Role.RUNNER in pcfg.worker_groups:
        raise ConfigError(
            f"--profiling_worker_groups: the Runner is the process you launched, {backend} cannot wrap it; "
            f"start the command under `{BINARIES[backend]}` yourself or leave Runner out",
            flag="--profiling_worker_groups",
        )
    return pcfg
