"""Entry point shared by every example: `run_rl(cfg)` trains and returns the process exit status.
`python -m sf.train --env=<name> ...` trains with the example script of the env's family (`sf.envs.families`).

`make_runner(cfg)` is Sample Factory's longer form of the same, for a script that registers observers first:
`cfg, runner = make_runner(cfg)`, `runner.register_observer(...)`, `runner.init()`, then `runner.run()`.

Exit statuses: 0 when the run ended as planned or was stopped by SIGINT/SIGTERM (summary status `ok` or
`interrupted`), 1 when it failed (status `error`), 2 when the config cannot run: then one `sf: error:` line
names the flag and nothing is written.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import traceback
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import Any

from sf.runner.observers import AlgoObserver, EpisodicHandler, Registrations
from sf.utils.errors import ConfigError, error_line
from sf.utils.fast_exit import skip_final_collection

log = logging.getLogger("sf")

EXIT_BAD_INPUT = 2


def _previous_precision(cfg) -> str | None:
    """The precision a run being resumed used (`precision_in_use`, or in configs from before that key `precision`,
    which then held the resolved value); None for a new run or a config without one."""
    from sf.experiment.config_file import read_config_or_empty

    if cfg.restart_behavior != "resume":
        return None
    config = read_config_or_empty(Path(cfg.train_dir) / cfg.experiment)
    in_use = config.get("precision_in_use")
    used = in_use.get("used") if isinstance(in_use, dict) else config.get("precision")
    return used if used in ("fp32", "bf16") else None


def _restore_precision(cfg, env_info, previous: str | None) -> None:
    """A resumed run keeps the precision it started with unless --precision is given: like the other flags of the
    run it continues, set before the run starts (the request travels to every process and node in cfg.precision)."""
    from sf.runner.build import has_image_encoder

    if previous is not None and "precision" not in cfg.cli_args and has_image_encoder(env_info):
        cfg.precision = previous


def _say_finished(cfg, resume) -> None:
    frames = {policy: loaded.state["env_steps"] for policy, loaded in resume.checkpoints.items()}
    log.info(
        "experiment %s already finished: its checkpoints hold %s env frames (--train_for_env_steps=%d); nothing "
        "trained, nothing written. Raise --train_for_env_steps to train on, or start over with "
        "--restart_behavior=restart",
        Path(cfg.train_dir) / cfg.experiment,
        frames,
        cfg.train_for_env_steps,
    )


def _log_changes(changed: dict[str, tuple], kept: Path | None) -> None:
    listed = "; ".join(f"--{key}: {old} -> {new}" for key, (old, new) in changed.items())
    kept_as = f"; the previous one is kept as {kept.name}" if kept is not None else ""
    log.info("resuming with a changed config (%s)%s", listed, kept_as)


class ExperimentStatus(IntEnum):
    """Sample Factory's status codes, as `TrainingRun.init` and `run` return them: an interrupted run returns
    SUCCESS here (exit status 0), and a config that cannot run 2 (`EXIT_BAD_INPUT`)."""

    SUCCESS = 0
    FAILURE = 1
    INTERRUPTED = 2


@dataclass
class _Prepared:
    """What `TrainingRun.init` found: the experiment folder, the env's spaces and where to resume from."""

    experiment: Any
    env_info: Any
    resume: Any
    settings: Any  # sf.runner.settings.RunSettings


class TrainingRun:
    """One training run in two steps, as Sample Factory's runner: `init()` checks the flags, the checkpoints and the
    env and writes config.json; `run()` trains. In between, `register_observer` and
    `register_episodic_stats_handler` add the user's hooks (`sf.runner.observers`)."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.registrations = Registrations()
        self._prepared: _Prepared | None = None
        self._init_status: int | None = None
        self._server = False
        self._lock = None

    def register_observer(self, observer: AlgoObserver) -> None:
        self.registrations.observers.append(observer)

    def register_episodic_stats_handler(self, handler: EpisodicHandler) -> None:
        self.registrations.episodic_handlers.append(handler)

    def init(self) -> int:
        """0 when the run can start (or has nothing left to train), else its exit status."""
        skip_final_collection()
        if not self.cfg.serial_mode and not self._server:
            # A parallel run starts its fork server first: the server imports torch and sf while this process does
            # the same
            from sf.envs.registry import registry_snapshot
            from sf.supervision import process_start

            process_start.start_server(registry_snapshot(), self.cfg.force_envs_single_thread)
            self._server = True
        self._lock = _lock(self.cfg)
        if self._lock is None:
            self._discard_server()
            self._init_status = EXIT_BAD_INPUT
            return self._init_status
        try:
            self._init_status = _prepare(self.cfg)
        except BaseException:
            self._end()
            raise
        if isinstance(self._init_status, _Prepared):
            self._prepared, self._init_status = self._init_status, ExperimentStatus.SUCCESS
        else:
            self._end()
        return self._init_status

    def run(self) -> int:
        """Train; the exit status (0: done or interrupted, 1: failed, 2: a config that cannot run)."""
        if self._init_status is None:
            self.init()
        if self._prepared is None:
            return self._init_status
        prepared, self._prepared = self._prepared, None
        try:
            return _train(self.cfg, prepared, self.registrations)
        finally:
            self._end()

    def _end(self) -> None:
        """The fork server (still there only when the run ended before it started a component) and the lock go."""
        self._discard_server()
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _discard_server(self) -> None:
        if self._server:
            from sf.supervision import process_start

            process_start.discard_server()
            self._server = False


def make_runner(cfg) -> tuple[Any, TrainingRun]:
    """Sample Factory's entry: `cfg, runner = make_runner(cfg)`, register observers, then `runner.init()` and
    `runner.run()`."""
    return cfg, TrainingRun(cfg)


def run_rl(cfg) -> int:
    """Check what only the filesystem and the env can tell, then train with the placement the config asks for."""
    _, runner = make_runner(cfg)
    status = runner.init()
    return runner.run() if status == ExperimentStatus.SUCCESS else status


def _lock(cfg):
    """The experiment folder's lock, held from `init` to the end of `run`: a second run of the same experiment is
    refused. None (the status printed) when it cannot be taken."""
    from sf.experiment.lock import ExperimentLock
    from sf.utils.logging import setup_logging

    setup_logging(cfg.log_level)
    lock = ExperimentLock(Path(cfg.train_dir) / cfg.experiment)
    try:
        lock.acquire()
    except ConfigError as err:
        print(error_line(err), file=sys.stderr)
        return None
    except OSError as exc:
        print(error_line(_unwritable(cfg, exc)), file=sys.stderr)
        return None
    return lock


def _unwritable(cfg, exc: OSError) -> ConfigError:
    return ConfigError(
        f"--train_dir: cannot write {exc.filename or cfg.train_dir} ({exc.strerror or exc}); choose a writable folder",
        flag="--train_dir",
    )


def _prepare(cfg) -> _Prepared | int:
    """The checks before a run (the experiment's lock held): what to resume, the env's spaces, the experiment
    folder and config.json; the exit status when the run cannot (or need not) start."""
    # Imported here rather than at the top: a bad flag is reported before torch is imported, in a fraction of
    # the time, by every example that imports run_rl.
    from sf.envs import EnvNotFoundError, UnsupportedSpaceError
    from sf.experiment.checkpoint import CheckpointError
    from sf.experiment.config_file import keep_previous_config, write_config
    from sf.experiment.folder import Experiment
    from sf.experiment.resume import find_resume_point
    from sf.runner.build import probe_env
    from sf.runner.settings import resolve_settings
    from sf.utils.logging import setup_logging

    env_error: Exception | None = None
    settings = None
    previous_precision = _previous_precision(cfg)  # before config.json is written again
    try:
        try:
            resume = find_resume_point(cfg)
        except CheckpointError as err:
            log.error("cannot resume: %s", err)
            return 1
        if resume is not None and resume.finished(cfg):
            _say_finished(cfg, resume)
            return 0
        try:
            env_info = probe_env(cfg)
        except (EnvNotFoundError, UnsupportedSpaceError) as exc:
            raise ConfigError(f"--env: {exc}", flag="--env") from None
        except ConfigError:
            raise
        except Exception as exc:  # the env exists but failed to start: a run that failed, with a summary
            env_error = exc
        try:
            experiment = Experiment(cfg)
            if resume is not None and resume.changed:
                _log_changes(resume.changed, keep_previous_config(experiment.dir))
            if env_error is None:
                _restore_precision(cfg, env_info, previous_precision)
                settings = resolve_settings(cfg, env_info, previous_precision)
            write_config(experiment.dir, cfg, settings.config_entries() if settings is not None else None)
        except OSError as exc:
            raise _unwritable(cfg, exc) from None
    except ConfigError as err:
        print(error_line(err), file=sys.stderr)
        return EXIT_BAD_INPUT
    if cfg.log_to_file:
        setup_logging(cfg.log_level, experiment.dir / "sf_log.txt")
    if env_error is not None:
        log.error("cannot train on env %r: %s", cfg.env, env_error)
        _write_failure(experiment, f"{type(env_error).__name__}: {env_error}")
        return 1
    if resume is not None:
        resume.set_aside_newer(cfg)
    log.info("experiment folder: %s (config, checkpoints, summary, profiles, TensorBoard events)", experiment.dir)
    return _Prepared(experiment, env_info, resume, settings)


def _train(cfg, prepared: _Prepared, registrations: Registrations) -> int:
    """The run itself, in the placement the config asks for; its exit status."""
    from sf.utils.process_settings import apply_process_settings

    experiment, env_info, settings = prepared.experiment, prepared.env_info, prepared.settings
    checkpoints = prepared.resume.checkpoints if prepared.resume is not None else {}
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        if cfg.with_pbt:
            registrations = _with_population(cfg, experiment, env_info, registrations)
        if cfg.serial_mode:
            from sf.runner.serial import run_serial

            apply_process_settings(cfg, "serial", 0)
            summary = run_serial(cfg, experiment, env_info, settings, stop, checkpoints, registrations)
        elif cfg.backend == "ray":
            from sf.distributed.backend import run_ray

            summary = run_ray(cfg, experiment, env_info, settings, stop, checkpoints, registrations)
        else:
            from sf.runner.parallel import run_parallel

            summary = run_parallel(
                cfg, experiment, env_info, settings, stop, resume=checkpoints, registrations=registrations
            )
    except ConfigError as err:  # what only the cluster can tell (a custom resource no node offers)
        print(error_line(err), file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as exc:  # before the run could start (the supervisor ends a started run with a summary)
        log.error("run failed:\n%s", traceback.format_exc())
        _remove_torch_shm()
        error = f"{type(exc).__name__}: {exc}".splitlines()[0]
        _write_failure(experiment, error)
        log.error("run ended with an error: %s", error)
        return 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if summary["status"] == "error":
        log.error("run ended with an error: %s", summary["error"])
        return 1
    return 0


def _with_population(cfg, experiment, env_info, registrations: Registrations) -> Registrations:
    """The observers with population-based training first (`sf.pbt`); ConfigError for a policy file that cannot be
    read."""
    from sf.pbt.population import PopulationBasedTraining

    population = PopulationBasedTraining.load(cfg, experiment.dir, env_info.reward_shaping)
    return Registrations([population, *registrations.observers], registrations.episodic_handlers)


def _remove_torch_shm() -> None:
    """torch unlinks the name of each shared memory file it makes once it is sized, and leaves it when the sizing fails
    (RLIMIT_FSIZE, a full /dev/shm); the name goes (what mapped it keeps it), torch shares these by descriptor."""
    removed = []
    for path in Path("/dev/shm").glob(f"torch_{os.getpid()}_*"):
        try:
            path.unlink()
            removed.append(str(path))
        except OSError:
            pass
    if removed:
        log.warning("removed %d /dev/shm file(s) this process left: %s", len(removed), ", ".join(removed))


def _write_failure(experiment, error: str) -> None:
    """summary.json of a run that failed before it started: status error, one line naming the cause."""
    try:
        _write_summary(experiment, error)
    except OSError as exc:  # the disk that failed the run may not take this either
        log.error("cannot write summary.json: %s", exc)


def _write_summary(experiment, error: str) -> None:
    experiment.write_json(
        "summary.json",
        {
            "status": "error",
            "error": error,
            "env_frames": {},
            "fps": 0.0,
            "fps_steady": None,
            "wall_time_s": 0.0,
            "avg_episode_reward": {},
            "num_episodes": 0,
        },
    )


def main(argv: list[str] | None = None) -> int:
    from sf.envs.families import family_of_argv

    argv = sys.argv[1:] if argv is None else list(argv)
    return run_rl(family_of_argv(argv).cfg_or_exit(argv))


if __name__ == "__main__":
    sys.exit(main())
