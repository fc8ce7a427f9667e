import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sf.chaos.trial import CARTPOLE as CHAOS_CARTPOLE

ROOT = Path(__file__).resolve().parents[1]

# the small parallel CartPole layout the injection matrix runs (2 workers x 4 envs, batches of 256, a 32x32 MLP),
# with a fixed seed and no periodic checkpoint: what most tests of a whole run need
CARTPOLE_LAYOUT = [*CHAOS_CARTPOLE, "--seed=1", "--save_every_sec=3600"]
LAYOUT = [flag for flag in CARTPOLE_LAYOUT if not flag.startswith("--env=")]


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that share a fixture built once (a run, read by many tests) go to one pytest-xdist worker, so the run is
    made once: the session-wide ones together, a module's own by module. Without this `-n 2` builds each twice."""
    for item in items:
        if any(m.name == "xdist_group" for m in item.iter_markers()):
            continue
        scopes = {
            d.scope
            for defs in item._fixtureinfo.name2fixturedefs.values()
            for d in defs[-1:]
            if d.scope != "function" and not d.argname.startswith(("tmp_path", "_", "worker_id", "testrun_uid"))
        }
        if "session" in scopes:
            item.add_marker(pytest.mark.xdist_group("shared_runs"))
        elif scopes & {"module", "class", "package"}:
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))


def sf_env() -> dict[str, str]:
    """The environment a run started now gets: this process's as it is at the call (a test may have changed it)."""
    return dict(os.environ, PYTHONUNBUFFERED="1")


def sf_command(args: list[str], module: str | None = "sf_examples.train_gym_env", script: list[str] | None = None):
    """The command line of an sf entry point (`python -m module`) or of a script (`script`, e.g. [python, path])."""
    return [*(script or [sys.executable, "-m", module]), *args]


def run_sf(
    args: list[str],
    timeout: float = 300,
    module: str | None = "sf_examples.train_gym_env",
    script: list[str] | None = None,
    **kwargs,
) -> subprocess.CompletedProcess:
    """Run an sf entry point as a user would, in its own process, to its end."""
    return subprocess.run(
        sf_command(args, module, script),
        cwd=ROOT,
        env=sf_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        **kwargs,
    )


def start_sf(
    args: list[str],
    module: str | None = "sf_examples.train_gym_env",
    script: list[str] | None = None,
    new_session: bool = True,
    **kwargs,
) -> subprocess.Popen:
    """Start an sf entry point as a user would, its output (stdout and stderr) read line by line from `.stdout`; in a
    session of its own unless told otherwise, so a test can end it and everything it started with one signal."""
    return subprocess.Popen(
        sf_command(args, module, script),
        cwd=ROOT,
        env=kwargs.pop("env", None) or sf_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=new_session,
        **kwargs,
    )


def read_until(proc: subprocess.Popen, pattern: str, lines: list[str]) -> re.Match:
    """Read a running sf's output into `lines` until a line matches `pattern` (fails if the output ends first)."""
    for line in proc.stdout:
        lines.append(line)
        match = re.search(pattern, line)
        if match:
            return match
    raise AssertionError(f"output ended before {pattern!r}:\n" + "".join(lines[-50:]))


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split()[2] != "Z"


def started_pids(lines: list[str]) -> dict[str, int]:
    """Component name -> pid, from the runner's `started <name> pid=<pid>` lines."""
    return {m.group(1): int(m.group(2)) for m in (re.search(r"started (.+?) pid=(\d+)", line) for line in lines) if m}


@pytest.fixture(autouse=True)
def env_registrations_stay_in_their_test():
    """What a test registers (envs, vector envs) is gone after it: a later test sees the registries as sf fills
    them (an error message listing registered envs, for one, depends on them)."""
    from sf.envs import registry

    saved = registry.registry_snapshot()
    yield
    registry._REGISTRY.clear()
    registry._VECTOR_REGISTRY.clear()
    registry._SHM_NAMES.clear()
    registry.restore_registry(saved)


@pytest.fixture(autouse=True)
def model_registrations_stay_in_their_test():
    """What a test registers with the model factory is gone after it (looked at only where the factory was imported,
    so that tests which never touch a model do not import torch for it)."""
    factory = sys.modules.get("sf.model.factory")
    saved = factory.model_factory_snapshot() if factory is not None else None
    yield
    factory = sys.modules.get("sf.model.factory")
    if factory is not None:
        factory.restore_model_factory(saved if saved is not None else factory.ModelFactory())


_SF_LOGGER = logging.getLogger("sf")
_SF_LOGGER_AT_START = (_SF_LOGGER.propagate, _SF_LOGGER.level, tuple(_SF_LOGGER.handlers))


@pytest.fixture(autouse=True)
def sf_logger_as_at_start():
    """Running sf in this process (a test, or a module fixture set up before this) sets up sf's logger: no
    propagation, its own handlers, a level; later tests reading the log through `caplog` would see nothing. Each test
    starts and ends with the logger as the session found it."""

    def reset():
        propagate, level, handlers = _SF_LOGGER_AT_START
        for handler in [h for h in _SF_LOGGER.handlers if h not in handlers]:
            _SF_LOGGER.removeHandler(handler)
            handler.close()
        _SF_LOGGER.propagate, _SF_LOGGER.level = propagate, level

    reset()
    yield
    reset()


@pytest.fixture(scope="session")
def sleepy_run(tmp_path_factory) -> Path:
    """One run of the simulation-bound case (an env that sleeps 1 ms a step), shared by the report and diff tests,
    which only read it."""
    from sf_examples.profiling.induced_bottlenecks import CASES, run_case

    return run_case(CASES["simulation"], str(tmp_path_factory.mktemp("sleepy")), "base")


@pytest.fixture
def shm_before():
    """/dev/shm entries present before the test; the test asserts nothing new is left behind."""
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def shm_leaked(before: set[str]) -> set[str]:
    """/dev/shm entries that appeared since `before` and that no live process holds: what a run left behind.
    (Entries other runs on the machine hold meanwhile are theirs, not leaks; nor are the files tests make on purpose
    as other programs' files, which a test running beside this one may have left there: their names say `foreign`.)"""
    from sf.supervision.orphans import shm_files, shm_inodes

    new = {f"/dev/shm/{name}" for name in set(os.listdir("/dev/shm")) - before if "foreign" not in name}
    if not new:
        return set()
    pids = [int(proc.name) for proc in Path("/proc").glob("[0-9]*")]
    held = set().union(*(shm_files(pid) for pid in pids))
    inodes = set().union(*(shm_inodes(pid) for pid in pids))
    return {path for path in new - held if os.path.exists(path) and os.stat(path).st_ino not in inodes}


def read_scalars(exp_dir: Path, policy: int | None = None) -> dict[str, list[float]]:
    """Every TensorBoard scalar the run wrote (or one policy's), by tag, in file order (values only)."""
    from sf.analysis.tb_scalars import read_scalars as read_steps_and_values

    return {tag: [value for _, value in points] for tag, points in read_steps_and_values(exp_dir, policy).items()}


def write_experiment(exp_dir: Path, cfg, model, version: int = 5, env_steps: int = 640) -> Path:
    """An experiment folder as training leaves one, without training: config.json and one checkpoint holding a
    training state of `model`. Returns the checkpoint."""
    import json

    import torch

    from sf.cfg.arguments import cfg_to_dict
    from sf.experiment.checkpoint import CheckpointManager
    from sf.model.factory import custom_model_parts

    exp_dir.mkdir(parents=True)
    (exp_dir / "config.json").write_text(json.dumps(cfg_to_dict(cfg)))
    state = {
        "model": model.state_dict(),
        "optimizer": torch.optim.Adam(model.parameters()).state_dict(),
        "env_steps": env_steps,
        "version": version,
        "model_parts": custom_model_parts(model),
    }
    return CheckpointManager(exp_dir, 0, keep=2).save(state, version=version, env_steps=env_steps)


@pytest.fixture(scope="session")
def custom_model_run(tmp_path_factory) -> tuple[Path, Path, str]:
    """A short serial run of the training script written for Sample Factory (a custom encoder on the `collect` env),
    its imports rewritten by the table of docs/customizing.md: (the rewritten scripts' folder, the experiment, the
    output). Shared by the tests of custom models, the docs samples and the profile tools, which only read it."""
    from sample_factory_imports import write_rewritten_scripts

    scripts = write_rewritten_scripts(tmp_path_factory.mktemp("sample_factory_scripts"))
    train_dir = tmp_path_factory.mktemp("custom_model_run")
    result = subprocess.run(
        [sys.executable, "-m", "train_collect", "--env=collect", "--serial_mode=True", "--train_for_env_steps=16384"]
        + ["--experiment_summaries_interval=1", "--seed=1", f"--train_dir={train_dir}", "--experiment=collect"],
        cwd=scripts,
        env=dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=os.pathsep.join([str(ROOT), str(scripts)])),
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    return scripts, train_dir / "collect", output


@pytest.fixture
def sf_log() -> list[str]:
    """The messages sf logs during the test (its logger does not propagate to pytest's capture)."""
    import logging

    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    logger = logging.getLogger("sf")
    logger.addHandler(handler)
    yield lines
    logger.removeHandler(handler)
