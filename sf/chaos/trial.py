"""One trial: a short parallel run, one fault at a random moment, what it left, and a resume from what it saved.

A population's run (the `pbt` family: two CartPole policies whose population-based training copies one's weights into
the other every few thousand frames) takes the faults that hit while such a copy is under way: the trial waits for a
replacement's log line and strikes within `REPLACEMENT_DELAY_S`. Every policy's newest checkpoint must survive, each
policy's file of hyperparameters must still read, and the resume must continue every policy where it was.

A fault on a component that heals must not end the run: the trial waits for the restart line, for the frame count to
rise again within `HEAL_LIMIT_S` of the fault and for the reward to keep its level, then stops the run with SIGTERM
and checks its end like any other. Every trial also puts files of its own into /dev/shm while the run goes on (a new
one, one with an old time, one named like another program's shared tensor): none may be gone at the end."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from sf.chaos.faults import (
    COMPONENTS,
    ENGINE,
    FORK_SERVER,
    MAIN,
    REPLACED_LEARNER,
    ROLLOUT,
    Fault,
    corrupt,
    expected_error,
    inject,
)
from sf.experiment.checkpoint import CheckpointError, CheckpointManager
from sf.profiling.live_feed import LIVE_FILE
from sf.supervision.orphans import child_pids, session_members, shm_files, shm_inodes

END_LIMIT_S = 5.0  # every fault ends the run within this (heartbeat faults: the timeout plus this)
HEAL_LIMIT_S = 10.0  # a healing fault: frames rise again within this (heartbeat faults: the timeout plus this)
REWARD_BAND = 0.5  # a healed run's average reward stays above the one before the fault less this share of it, less 1
OBSERVE_EXTRA_S = 10.0  # how much longer a late run is watched before it counts as hung
START_TIMEOUT_S = 180.0  # for the fault's target to appear, on a busy machine
RESUME_TIMEOUT_S = 240.0
POLL_S = 0.05
EXIT_GRACE_S = 2.0  # a process of the run may still be exiting (the kernel ending the fork server) as its main ends
STARTED = re.compile(r"started (.+?) pid=(\d+)")
RESTARTED = re.compile(r"\] (\S+) \(pid \d+\) restarted as pid (\d+)")
REWARD = re.compile(r"Avg episode reward: \[\(0, '(-?[\d.]+)'\)")
RESUMED = re.compile(r"Learner (\d+) resumed from policy version (\d+)")
CHECKPOINT_NAME = re.compile(r"checkpoint_(\d+)_(\d+)\.pth$")
REPLACEMENT = re.compile(r"PBT: policy (\d+) \(.*\) takes policy (\d+)'s weights")
REPLACEMENT_DELAY_S = 0.3  # a fault in a replacement hits up to this long after the replacement's log line


@dataclass(frozen=True)
class Family:
    module: str
    flags: tuple[str, ...]
    policies: int = 1


CARTPOLE = (
    "--env=CartPole-v1",
    "--use_rnn=False",
    "--encoder_mlp_layers",
    "32",
    "32",
    "--num_workers=2",
    "--num_envs_per_worker=4",
    "--batch_size=256",
    "--rollout=32",
)
FAMILIES = {
    "cartpole": Family("sf_examples.train_gym_env", CARTPOLE),
    "doom": Family(
        "sf_examples.vizdoom.train_vizdoom",
        ("--env=doom_basic", "--num_workers=2", "--num_envs_per_worker=4", "--batch_size=256"),
    ),
    "pbt": Family(  # a replacement about every 2k frames of the worse policy, whatever the gap
        "sf_examples.train_gym_env",
        (
            *CARTPOLE,
            "--num_policies=2",
            "--with_pbt=True",
            "--pbt_start_mutation=2048",
            "--pbt_period_env_steps=2048",
            "--pbt_replace_reward_gap=0",
            "--pbt_replace_reward_gap_absolute=0",
        ),
        policies=2,
    ),
}


@dataclass
class TrialResult:
    index: int
    family: str
    fault: str
    target: str = ""
    at_s: float | None = None  # when the fault hit, seconds after the launch
    end_s: float | None = None  # from the fault to the last process of the run gone; None: not within the watch
    exit_code: int | None = None
    status: str | None = None
    error: str | None = None
    processes_left: list[str] = field(default_factory=list)
    shm_left: list[str] = field(default_factory=list)
    healed_s: float | None = None  # a healing fault: from the fault to the frame count rising again
    foreign_removed: list[str] = field(default_factory=list)  # files of "other programs" the run removed
    checkpoint_before: str | None = None  # the newest checkpoint file when the fault hit
    checkpoint_after: str | None = None  # the newest one that loads after the run
    resumed_from: str | None = None  # policy version the resume started from ("-": a fresh start)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


class _Log:
    """The run's output file, read as it grows."""

    def __init__(self, path: Path):
        self.path = path
        self.text = ""

    def read(self) -> str:
        try:
            self.text = self.path.read_text(errors="replace")
        except OSError:
            pass
        return self.text

    def pids(self) -> dict[str, int]:
        return {m.group(1): int(m.group(2)) for m in STARTED.finditer(self.read())}


def command(family: Family, train_dir: Path, experiment: str, heartbeat_timeout_s: int, extra=()) -> list[str]:
    return [
        sys.executable,
        "-m",
        family.module,
        *family.flags,
        "--inference_placement=own_process",
        "--seed=1",
        "--save_every_sec=1",
        "--keep_checkpoints=3",
        f"--heartbeat_timeout_sec={heartbeat_timeout_s}",
        "--train_for_env_steps=1000000000",
        f"--train_dir={train_dir}",
        f"--experiment={experiment}",
        "--log_to_file=False",
        *extra,
    ]


def run_trial(
    index: int,
    family_name: str,
    fault: Fault,
    rng: random.Random,
    train_dir: Path,
    heartbeat_timeout_s: int = 5,
    max_delay_s: float = 4.0,
    keep: bool = False,
) -> TrialResult:
    result = TrialResult(index, family_name, fault.name)
    family = FAMILIES[family_name]
    experiment = f"trial_{index:04d}_{fault.name}"
    exp_dir = train_dir / experiment
    shutil.rmtree(exp_dir, ignore_errors=True)
    exp_dir.mkdir(parents=True)
    cmd = command(family, train_dir, experiment, heartbeat_timeout_s)
    shm_before = _shm_names()
    log = _Log(exp_dir / "chaos_run.log")
    launched = time.monotonic()
    with open(log.path, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    foreign: list[Path] = []
    healing = False
    try:
        pid, result.target, worker = _target(fault, proc, log, exp_dir, rng)
        foreign = _make_foreign_files(index)
        time.sleep(rng.uniform(0.0, REPLACEMENT_DELAY_S if fault.in_replacement else max_delay_s))
        before = {p: _newest_name(exp_dir, p) for p in range(family.policies)}
        result.checkpoint_before = before[0]
        if proc.poll() is not None:
            result.problems.append(f"the run ended before the fault (exit {proc.returncode})")
            return result
        healing = fault.heals_on(result.target)
        frames, reward = _frames(exp_dir), _last_reward(log.read())
        try:
            inject(fault, pid)
        except ProcessLookupError:
            raise _TrialError(f"{result.target} (pid {pid}) ended before the fault") from None
        hit = time.monotonic()
        result.at_s = hit - launched
        heartbeat = heartbeat_timeout_s if fault.heartbeat else 0.0
        if healing:
            restarted = worker if result.target.startswith("VizDoom engine") else result.target
            _check_healing(result, proc, log, exp_dir, restarted, hit, HEAL_LIMIT_S + heartbeat, frames, reward)
            proc.send_signal(signal.SIGTERM)
            hit, heartbeat = time.monotonic(), 0.0
        limit = END_LIMIT_S + heartbeat
        result.end_s, result.processes_left = _watch_end(proc, limit + OBSERVE_EXTRA_S, hit)
        if result.end_s is None or result.end_s > limit:
            result.problems.append(f"not ended within {limit:.0f} s")
        if result.processes_left:
            result.problems.append("processes left")
    except _TrialError as exc:
        result.problems.append(str(exc))
        _end_session(proc)
        return result
    finally:
        if proc.poll() is None:
            _end_session(proc)
        result.foreign_removed = [str(path) for path in foreign if not path.exists()]
        for path in foreign:
            path.unlink(missing_ok=True)
    if result.foreign_removed:
        result.problems.append("files of other programs removed")
    result.exit_code = proc.returncode
    result.shm_left = _shm_left(shm_before | {path.name for path in foreign})
    if result.shm_left:
        result.problems.append("/dev/shm files left")
    _check_outcome(result, fault, exp_dir, worker, healing)
    expected_from = {p: _check_checkpoints(result, fault, exp_dir, p, before[p]) for p in range(family.policies)}
    if family.policies > 1:
        _check_policy_files(result, exp_dir, family.policies)
    _check_resume(result, family, train_dir, experiment, heartbeat_timeout_s, expected_from)
    if not keep and result.ok:
        shutil.rmtree(exp_dir, ignore_errors=True)
    return result


class _TrialError(Exception):
    pass


def _target(fault: Fault, proc: subprocess.Popen, log: _Log, exp_dir: Path, rng: random.Random):
    """(pid, name, rollout worker) of the process the fault hits, once it runs (and the checkpoints it waits for
    exist; for a fault in a replacement, once a replacement's line appeared)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    worker = ROLLOUT.format(rng.randrange(2))
    name = {MAIN: MAIN, FORK_SERVER: FORK_SERVER, "component": rng.choice(COMPONENTS)}.get(fault.target, fault.target)
    name = name.format(worker[-1])
    replacements = len(REPLACEMENT.findall(log.read())) + 1 if fault.in_replacement else 0
    while True:
        if time.monotonic() > deadline:
            raise _TrialError(f"{name} did not start within {START_TIMEOUT_S:.0f} s")
        if proc.poll() is not None:
            raise _TrialError(f"the run ended before the fault (exit {proc.returncode})")
        pids = log.pids()
        found = REPLACEMENT.findall(log.text)
        if fault.in_replacement and len(found) < replacements:
            time.sleep(POLL_S / 5)
            continue
        target = f"Learner {found[-1][0]}" if fault.target == REPLACED_LEARNER else name
        pid = _pid_of(target, worker, pids, proc.pid)
        if pid is not None and len(_checkpoints(exp_dir)) >= fault.after_checkpoints:
            return pid, target, worker
        time.sleep(POLL_S)


def _pid_of(name: str, worker: str, pids: dict[str, int], main_pid: int) -> int | None:
    if name == MAIN:
        return main_pid if pids else None  # once component processes are being started
    if name == FORK_SERVER:
        learner = pids.get("Learner 0")
        return _parent(learner) if learner is not None else None
    if name == ENGINE.format(worker[-1]):
        worker_pid = pids.get(worker)
        engines = [p for p in child_pids(worker_pid) if b"vizdoom" in _cmdline(p)] if worker_pid else []
        return engines[0] if engines else None
    return pids.get(name)


def _watch_end(proc: subprocess.Popen, watch_s: float, since: float) -> tuple[float | None, list[str]]:
    """(seconds from `since` until the main process, every process of its session and its guard, which runs in a
    session of its own and cleans up last, were gone, or None; the processes still there at the end of the watch)."""
    deadline = since + watch_s
    while time.monotonic() < deadline:
        if proc.poll() is not None and not _run_processes(proc.pid):
            return time.monotonic() - since, []
        time.sleep(POLL_S)
    return None, [_describe(pid) for pid in _run_processes(proc.pid)]


def _run_processes(main_pid: int) -> list[int]:
    """The live processes of the run whose main process (and session leader) is `main_pid`, its guard included."""
    guard = f"sf.supervision.guard\0{main_pid}\0".encode()
    guards = [int(p.name) for p in Path("/proc").glob("[0-9]*") if guard in _cmdline(int(p.name))]
    return [*session_members(main_pid), *guards]


def _end_session(proc: subprocess.Popen) -> None:
    for pid in session_members(proc.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def _check_outcome(result: TrialResult, fault: Fault, exp_dir: Path, worker: str, healed: bool) -> None:
    summary_path = exp_dir / "summary.json"
    if summary_path.exists():
        summary = json.loads(summary_path.read_text())
        result.status, result.error = summary.get("status"), summary.get("error")
    expect_exit, expect_status = ((0,), "interrupted") if healed else (fault.expect_exit, fault.expect_status)
    if result.exit_code not in expect_exit:
        result.problems.append(f"exit code {result.exit_code}, expected {expect_exit}")
    if result.status != expect_status:
        result.problems.append(f"status {result.status}, expected {expect_status}")
    pattern = None if healed else expected_error(fault, result.target, worker)
    if pattern is None:
        if result.error is not None:
            result.problems.append("unexpected error")
    elif result.error is None or not pattern.search(result.error):
        result.problems.append("unclear error")


def _check_healing(
    result: TrialResult,
    proc: subprocess.Popen,
    log: _Log,
    exp_dir: Path,
    component: str,
    hit: float,
    limit_s: float,
    frames: int,
    reward: float | None,
) -> None:
    """The run restarts `component` and trains on: the frame count passes the one at the fault within `limit_s`,
    and the average reward keeps its level."""
    while time.monotonic() - hit < limit_s:
        if proc.poll() is not None:
            raise _TrialError(f"the run ended after the fault (exit {proc.returncode}) instead of healing")
        if any(m.group(1) == component for m in RESTARTED.finditer(log.read())) and _frames(exp_dir) > frames:
            result.healed_s = time.monotonic() - hit
            break
        time.sleep(POLL_S)
    else:
        restarted = any(m.group(1) == component for m in RESTARTED.finditer(log.read()))
        what = "frames did not rise" if restarted else f"{component} not restarted"
        raise _TrialError(f"{what} within {limit_s:.0f} s of the fault")
    after = _last_reward(log.read())
    if reward is not None and after is not None and after < reward - REWARD_BAND * abs(reward) - 1.0:
        result.problems.append(f"average reward fell from {reward:.2f} to {after:.2f}")


def _frames(exp_dir: Path) -> int:
    """The newest frame count in the live feed (every component's snapshot carries it), read from its growing end."""
    try:
        with open(exp_dir / LIVE_FILE, "rb") as feed:
            feed.seek(max(0, feed.seek(0, os.SEEK_END) - 16_384))
            lines = feed.read().decode(errors="replace").splitlines()[1:]
    except OSError:
        return 0
    frames = []
    for line in lines:
        try:
            frames.append(json.loads(line).get("frames"))
        except ValueError:  # the line being written
            continue
    return max((f for f in frames if isinstance(f, int)), default=0)


def _last_reward(text: str) -> float | None:
    found = REWARD.findall(text)
    return float(found[-1]) if found else None


def _make_foreign_files(index: int) -> list[Path]:
    """Files of other programs, made while the run goes on: a new one nobody holds, one with an old time, one named
    like the shared tensor of a process that is no part of the run (this one)."""
    paths = [
        Path(f"/dev/shm/sf_chaos_foreign_{os.getpid()}_{index}"),
        Path(f"/dev/shm/sf_chaos_foreign_old_{os.getpid()}_{index}"),
        Path(f"/dev/shm/torch_{os.getpid()}_foreign{index}_0"),
    ]
    for path in paths:
        path.write_bytes(b"not the run's")
    os.utime(paths[1], (946_684_800, 946_684_800))
    return paths


def _check_checkpoints(
    result: TrialResult, fault: Fault, exp_dir: Path, policy: int, before: str | None
) -> tuple[int, int] | None:
    """The policy's newest checkpoint that loads must be the newest there was at the fault, or newer (with policy 0's
    newest corrupted on purpose: the one before it). Returns the (policy version, env frames) a resume must continue
    from."""
    manager = CheckpointManager(exp_dir, policy, keep=3)
    named = "" if policy == 0 else f" (policy {policy})"
    if fault.name == "corrupt_checkpoint" and policy == 0:
        paths = manager.paths()
        if len(paths) < 2:
            result.problems.append("fewer than two checkpoints to corrupt one of")
            return None
        corrupt(paths[-1])
        must_be = paths[-2].name
    else:
        must_be = before
    try:
        loaded = manager.newest()
    except CheckpointError as exc:
        result.problems.append(f"no checkpoint loads{named}: {exc}")
        return None
    if policy == 0:
        result.checkpoint_after = loaded.path.name if loaded is not None else None
    if must_be is not None:
        if loaded is None or _version(loaded.path.name) < _version(must_be):
            result.problems.append(f"checkpoint lost{named}: {must_be}")
        elif fault.name == "corrupt_checkpoint" and loaded.path.name != must_be:
            result.problems.append(f"loaded {loaded.path.name}, expected {must_be}")
    return (loaded.state["version"], loaded.state["env_steps"]) if loaded is not None else None


def _check_policy_files(result: TrialResult, exp_dir: Path, policies: int) -> None:
    """Each policy's hyperparameters are a whole JSON file (population-based training writes them atomically)."""
    for policy in range(policies):
        path = exp_dir / f"policy_{policy:02d}_cfg.json"
        try:
            json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            result.problems.append(f"{path.name} does not read: {exc}")


def _check_resume(
    result: TrialResult,
    family: Family,
    train_dir: Path,
    experiment: str,
    heartbeat_s: int,
    expected: dict[int, tuple[int, int] | None],
) -> None:
    """A short resume in the same folder continues each policy from its (version, frames) in `expected` (None:
    there was nothing to resume), training every policy past the frames it had."""
    exp_dir = train_dir / experiment
    frames = max((saved[1] for saved in expected.values() if saved is not None), default=0) + 1
    cmd = command(family, train_dir, experiment, heartbeat_s, [f"--train_for_env_steps={frames}"])
    with open(exp_dir / "chaos_resume.log", "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            proc.wait(timeout=RESUME_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            result.problems.append(f"the resume did not end within {RESUME_TIMEOUT_S:.0f} s")
            _end_session(proc)
            return
    text = (exp_dir / "chaos_resume.log").read_text(errors="replace")
    resumed = {int(policy): version for policy, version in RESUMED.findall(text)}
    result.resumed_from = resumed.get(0, "-")
    if proc.returncode != 0:
        result.problems.append(f"the resume exited with {proc.returncode}")
    for policy, saved in expected.items():
        want = "-" if saved is None else str(saved[0])
        if resumed.get(policy, "-") != want:
            named = "" if policy == 0 else f" (policy {policy})"
            result.problems.append(f"resumed from {resumed.get(policy, '-')}, expected {want}{named}")
    left = _members_after(proc.pid, EXIT_GRACE_S)
    if left:
        result.problems.append(f"the resume left processes: {', '.join(_describe(pid) for pid in left)}")
        _end_session(proc)


def _checkpoints(exp_dir: Path, policy: int = 0) -> list[Path]:
    return CheckpointManager(exp_dir, policy, keep=3).paths()


def _newest_name(exp_dir: Path, policy: int = 0) -> str | None:
    paths = _checkpoints(exp_dir, policy)
    return paths[-1].name if paths else None


def _version(name: str) -> int:
    match = CHECKPOINT_NAME.search(name)
    return int(match.group(1)) if match else -1


def _parent(pid: int) -> int | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(text[text.rindex(")") + 2 :].split()[1])


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _describe(pid: int) -> str:
    program = _cmdline(pid).split(b"\0")[0].decode(errors="replace").rsplit("/", 1)[-1]
    return f"{program} (pid {pid})"


def _shm_names() -> set[str]:
    try:
        return set(os.listdir("/dev/shm"))
    except OSError:
        return set()


def _members_after(sid: int, grace_s: float) -> list[int]:
    """The session's live processes once `grace_s` has passed or none is left, whichever comes first."""
    deadline = time.monotonic() + grace_s
    while (left := session_members(sid)) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    return left


def _shm_left(before: set[str]) -> list[str]:
    """/dev/shm entries made since `before` that no live process holds (other programs' files are theirs)."""
    new = {f"/dev/shm/{name}" for name in _shm_names() - before}
    if not new:
        return []
    pids = [int(p.name) for p in Path("/proc").glob("[0-9]*")]
    held = set().union(*(shm_files(pid) for pid in pids))
    inodes = set().union(*(shm_inodes(pid) for pid in pids))
    return sorted(path for path in new - held if os.path.exists(path) and os.stat(path).st_ino not in inodes)
