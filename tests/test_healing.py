"""What can heal, heals: rollout workers and inference workers that die or hang are started again in place and the
run trains on; past the allowance, or with restarts switched off, the run ends as before."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import CARTPOLE_LAYOUT, ROOT, alive, read_until, shm_leaked, started_pids

TESTS = Path(__file__).parent
ENV = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
FAST = [*CARTPOLE_LAYOUT, "--experiment_summaries_interval=1"]
RESTARTED = r"\] (\S+) \(pid (\d+)\) restarted as pid (\d+) after: (.*) \(restart"


def _frames(exp: Path) -> int:
    """The newest frame count in the live feed (each component's snapshot and the runner's progress line carry it)."""
    try:
        lines = (exp / "profile_live.jsonl").read_text().splitlines()
    except OSError:
        return 0
    frames = []
    for line in lines[-20:]:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # the line being written
            continue
        frames.append(record.get("frames", record.get("progress", {}).get("frames")))
    return max((f for f in frames if isinstance(f, int)), default=0)


def _trains_on(exp: Path, beyond: int, within_s: float = 20.0) -> float:
    """Seconds until the frame count passes `beyond` by a batch, failing after `within_s` (the matrix of
    `python -m sf.chaos` holds a run to 10 s; a test beside another on two cores may need twice that)."""
    start = time.monotonic()
    while _frames(exp) < beyond + 256:
        assert time.monotonic() - start < within_s, f"frames stuck at {_frames(exp)} (were {beyond})"
        time.sleep(0.1)
    return time.monotonic() - start


@pytest.fixture
def run(tmp_path):
    """Starts training runs in sessions of their own; whatever is left of them is killed afterwards."""
    procs: list[subprocess.Popen] = []

    def start(*args: str, entry: list[str] | None = None) -> subprocess.Popen:
        proc = subprocess.Popen(
            [sys.executable, *(entry or ["-m", "sf_examples.train_gym_env"]), *args, f"--train_dir={tmp_path}"],
            cwd=ROOT,
            env=ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_rollout_and_inference_workers_killed_or_stopped_are_restarted_until_the_allowance_is_spent(
    tmp_path, run, shm_before
):
    exp = tmp_path / "heal"
    proc = run(*FAST, "--inference_placement=own_process", "--heartbeat_timeout_sec=4", "--max_component_restarts=1",
               "--train_for_env_steps=100000000", "--experiment=heal")  # fmt: skip
    lines: list[str] = []
    read_until(proc, r"Fps is", lines)
    pids = started_pids(lines)

    def heal(component: str, how: signal.Signals, cause: str) -> int:
        frames = _frames(exp)
        os.kill(pids[component], how)
        match = read_until(proc, RESTARTED, lines)
        assert match.group(1) == component and re.search(cause, match.group(4)), match.group(0)
        _trains_on(exp, frames)
        return int(match.group(3))

    heal("RolloutWorker_w1", signal.SIGKILL, r"exited with code -9 \(SIGKILL\)")
    pids["InferenceWorker_p0-w0"] = heal("InferenceWorker_p0-w0", signal.SIGKILL, r"exited with code -9")
    heal("RolloutWorker_w0", signal.SIGSTOP, r"sent no heartbeat for 4 s")
    # once more within the hour: past --max_component_restarts=1, the run ends as it would without restarts
    os.kill(pids["InferenceWorker_p0-w0"], signal.SIGKILL)
    rest, _ = proc.communicate(timeout=60)
    out = "".join(lines) + rest
    assert proc.returncode == 1, out[-3000:]
    summary = json.loads((exp / "summary.json").read_text())
    assert summary["status"] == "error"
    assert re.fullmatch(
        r"InferenceWorker_p0-w0 exited with code -9 \(SIGKILL\); not restarted: 1 restart\(s\) within the last hour "
        r"\(--max_component_restarts\)",
        summary["error"],
    ), summary["error"]
    restarts = summary["component_restarts"]
    assert [r["component"] for r in restarts] == ["RolloutWorker_w1", "InferenceWorker_p0-w0", "RolloutWorker_w0"]
    assert all(r["pid"] and r["at_s"] > 0 for r in restarts)
    assert not shm_leaked(shm_before)


def test_a_serial_run_restarts_a_rollout_worker_whose_env_raised_and_trains_to_the_end(tmp_path, run):
    proc = run(
        "--env=fails_once", "--serial_mode=True", "--num_workers=2", "--num_envs_per_worker=4", "--rollout=16",
        "--batch_size=64", "--use_rnn=False", "--train_for_env_steps=20000", "--experiment=serial",
        entry=[str(TESTS / "crash_env.py")],
    )  # fmt: skip
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out[-3000:]
    assert "RolloutWorker_w" in out and "restarted with fresh envs after: RolloutWorker_w" in out
    summary = json.loads((tmp_path / "serial" / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["env_frames"]["0"] >= 20000
    assert len(summary["component_restarts"]) == 1
    assert "RuntimeError: the simulator crashed" in summary["component_restarts"][0]["cause"]


def test_a_worker_killed_holding_every_queue_lock_is_restarted_after_the_locks_are_taken_back(tmp_path, run):
    """The worst moment to die: inside a put or a get of every queue it can reach. Each lock is taken back (the
    others were waiting on them), then the worker is started again and the run trains on."""
    exp = tmp_path / "locks"
    proc = run(
        *FAST, "--env=lock_holding_cartpole", "--train_for_env_steps=100000000", "--experiment=locks",
        entry=[str(TESTS / "lock_holding_env.py")],
    )  # fmt: skip
    lines: list[str] = []
    taken = int(read_until(proc, r"locks taken: (\d+)", lines).group(1))
    frames = _frames(exp)
    os.kill(started_pids(lines)["RolloutWorker_w0"], signal.SIGKILL)
    read_until(proc, RESTARTED, lines)
    took_back = [line for line in lines if "took back the lock of the queue" in line]
    assert len(took_back) == taken >= 4, took_back
    _trains_on(exp, frames)
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, rest[-3000:]


def _training_info(exp: Path) -> list[tuple[int, int]]:
    """(pid, training steps) of each `set_training_info` call the envs of `tests/healing_run.py` noted, in order."""
    try:
        text = (exp / "training_info.log").read_text()
    except OSError:
        return []
    pairs = (line.split() for line in text.splitlines() if line.count(" ") == 1)  # the last line may be half written
    return [(int(pid), int(steps)) for pid, steps in pairs]


def test_a_replacement_rollout_worker_hears_how_far_training_went_and_the_heal_ends_only_its_processes(
    tmp_path, run, shm_before
):
    """The runner's route to a restarted worker moves with it: the new process's envs get `set_training_info` with
    the steps trained so far, rising, within a few progress lines (the old route led to the dead worker's inbox). The
    heal ends the dead worker's own processes (its envs' engines) and no other: an observer's helper, started by the
    main process during the run, lives on."""
    exp = tmp_path / "info"
    proc = run(*FAST, "--env=training_info_cartpole", "--train_for_env_steps=100000000", "--experiment=info",
               entry=[str(TESTS / "healing_run.py")])  # fmt: skip
    lines: list[str] = []
    read_until(proc, r"Fps is", lines)
    pids = started_pids(lines)
    dead, workers = pids["RolloutWorker_w1"], {pids["RolloutWorker_w0"], pids["RolloutWorker_w1"]}
    engines = {int(path.suffix[1:]): int(path.stem) for path in (exp / "engines").iterdir()}  # engine -> its maker
    engines = {engine: maker for engine, maker in engines.items() if maker in workers}  # not the probe's (closed)
    observer_child = int((exp / "observer_child.pid").read_text())
    assert sorted(engines.values()).count(dead) == 4 and all(alive(pid) for pid in [*engines, observer_child])
    os.kill(dead, signal.SIGKILL)
    replacement = int(read_until(proc, RESTARTED, lines).group(3))
    assert [alive(pid) for pid, worker in engines.items() if worker == dead] == [False] * 4
    assert all(alive(pid) for pid, worker in engines.items() if worker != dead) and alive(observer_child)
    trained_at_restart = max((steps for _, steps in _training_info(exp)), default=0)
    deadline = time.monotonic() + 30.0
    heard: list[int] = []
    while time.monotonic() < deadline:
        # until it hears from the runner, a worker's envs get 0 steps (what it knows by itself)
        heard = [steps for pid, steps in _training_info(exp) if pid == replacement and steps > 0]
        if len(set(heard)) >= 2:
            break
        time.sleep(0.2)
    assert len(set(heard)) >= 2, f"the replacement heard {heard} (the others up to {trained_at_restart})"
    assert heard == sorted(heard) and heard[0] >= trained_at_restart, heard
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, rest[-3000:]
    assert not shm_leaked(shm_before)


def test_trajectories_dropped_for_a_restart_do_not_count_as_trained_frames():
    """A batcher that holds a restarted worker's trajectories drops them; the frames it reports to the learner are
    those of the trajectories it batched, nothing of the dropped ones."""
    from types import SimpleNamespace

    import numpy as np
    import torch

    from sf.runtime.batcher import Batcher
    from sf.runtime.messages import Train, Trajectories

    rollout, slots_per_worker = 8, 4
    cfg = SimpleNamespace(batch_size=3 * rollout, num_batches_per_epoch=1, rollout=rollout, async_rl=False)
    layout = SimpleNamespace(worker_of_slot=lambda slot: slot // slots_per_worker)
    buffers = SimpleNamespace(layout=layout, gather=lambda index: {"slots": index})
    dropped = []
    incarnations = SimpleNamespace(of=np.zeros(2, dtype=np.int64), count_dropped=dropped.append)
    batcher = Batcher(cfg, 0, buffers, frames_per_step=2, incarnations=incarnations)
    sent = []
    batcher.loop = SimpleNamespace(send=lambda dest, msg: sent.append(msg))
    batcher._on_trajectories(Trajectories([0], worker=0))
    batcher._on_trajectories(Trajectories([4], worker=1))
    batcher.forget_worker(1)  # worker 1 restarted: its trajectory waiting here is dropped
    incarnations.of[1] = 1
    batcher._on_trajectories(Trajectories([5], worker=1, incarnation=0))  # one of its dead incarnation's, late
    batcher._on_trajectories(Trajectories([1, 2], worker=0))
    trains = [msg for msg in sent if isinstance(msg, Train)]
    assert [t.batch["slots"].tolist() for t in trains] == [[0, 1, 2]] and dropped == [1, 1]
    assert sum(t.new_frames for t in trains) == 3 * rollout * 2
    assert torch.is_tensor(trains[0].batch["slots"])


QUEUE_DAMAGE = re.compile(r"Queue size is less than message size|New size is incorrect|[Uu]npickl|spare queue")


def _session_members(sid: int) -> list[int]:
    """Live processes of session `sid` (a run started by `run` leads a session of its own)."""
    members = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[3]) == sid and fields[0] not in "ZX":
            members.append(int(entry.name))
    return members


def _kill_busy_rollout_workers(tmp_path, run, shm_before, kills: int, inference_workers: int) -> None:
    """`kills` SIGKILLs of rollout workers of a busy run (4 workers, inference in processes of its own), one as soon
    as the one before healed and training went on: each is restarted (no stall), nothing ever damages a queue (no
    faster-fifo error line, no message that does not unpickle), the spare queues never run out, and after the last
    the run trains on, stops cleanly and leaves nothing behind."""
    import random
    import threading

    from sf.supervision.orphans import describe

    exp = tmp_path / "kills"
    proc = run(*FAST, "--num_workers=4", "--inference_placement=own_process",
               f"--policy_workers_per_policy={inference_workers}", f"--max_component_restarts={kills}",
               "--train_for_env_steps=100000000", "--experiment=kills")  # fmt: skip
    lines: list[str] = []
    read_until(proc, r"Fps is", lines)
    pids = started_pids(lines)
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)  # the rest, as it comes
    reader.start()
    rng = random.Random(kills)
    for kill in range(kills):
        time.sleep(rng.uniform(0.0, 1.0))  # a random moment of its work
        frames, seen = _frames(exp), len(lines)
        worker = f"RolloutWorker_w{rng.randrange(4)}"
        os.kill(pids[worker], signal.SIGKILL)
        deadline = time.monotonic() + 30.0
        while not (restarts := [m for m in map(re.compile(RESTARTED).search, lines[seen:]) if m]):
            assert proc.poll() is None and time.monotonic() < deadline, f"kill {kill + 1}: " + "".join(lines[-40:])
            time.sleep(0.05)
        assert restarts[0].group(1) == worker, restarts[0].group(0)
        pids[worker] = int(restarts[0].group(3))
        _trains_on(exp, frames, within_s=30.0)
    _trains_on(exp, _frames(exp), within_s=30.0)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    reader.join(10)
    out = "".join(lines)
    assert proc.returncode == 0, out[-3000:]
    assert not [line for line in lines if QUEUE_DAMAGE.search(line)], out[-3000:]
    summary = json.loads((exp / "summary.json").read_text())
    assert summary["status"] == "interrupted" and len(summary["component_restarts"]) == kills
    deadline = time.monotonic() + 5.0  # helpers that end with the main process (its resource tracker) may lag it
    while (left := _session_members(proc.pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, [describe(pid) for pid in left]
    assert not shm_leaked(shm_before)


@pytest.mark.parametrize(
    "inference_workers", [pytest.param(1, marks=pytest.mark.slow), 2]
)  # two inference workers per policy is the case that ran out of spares; one is the slow suite's
def test_rollout_workers_killed_one_after_another_heal_every_time(tmp_path, run, shm_before, inference_workers):
    _kill_busy_rollout_workers(tmp_path, run, shm_before, kills=4, inference_workers=inference_workers)


@pytest.mark.slow
@pytest.mark.parametrize("inference_workers", [1, 2])
def test_25_kills_of_busy_rollout_workers_heal_every_time(tmp_path, run, shm_before, inference_workers):
    _kill_busy_rollout_workers(tmp_path, run, shm_before, kills=25, inference_workers=inference_workers)


def test_a_restart_that_finds_every_spare_queue_on_its_way_back_waits_for_one():
    """Two spares, three deaths in a row: the third finds both in use (one still read by a process that has not moved
    on yet) and waits; once every process has moved on, that spare is renewed and the restart goes on. Nothing ends
    the run."""
    from types import SimpleNamespace

    import faster_fifo

    from sf.supervision.healer import Healer, Process
    from sf.supervision.incarnations import Incarnations
    from sf.supervision.supervisor import Failure

    child = SimpleNamespace(pid=os.getpid(), started=None, threads=set())
    supervisor = SimpleNamespace(
        server_failed=False, ended_threads=set(), children={"RolloutWorker_w0": child, "Learner 0": child},
        own_processes=lambda label: [], ledger=SimpleNamespace(names=lambda since: set()), started=time.time(),
        running=lambda label: True,
    )  # fmt: skip
    cfg = SimpleNamespace(restart_failed_components=True, max_component_restarts=10)
    processes = {"Learner 0": Process("learner", 0, None, 0), "RolloutWorker_w0": Process("rollout", 0, None, 1)}
    inc = Incarnations(2, 1, 1)
    started = []
    healer = Healer(cfg, supervisor, inc, {}, [faster_fifo.Queue(1000) for _ in range(2)], processes, colocated=False,
                    start=lambda process: started.append(process) or 1000 + len(started))  # fmt: skip
    failure = Failure("RolloutWorker_w0", "exited with code -9 (SIGKILL)")

    def everyone_moves_on() -> None:
        inc.ack[:] = inc.gen

    assert healer.take(failure) is None
    everyone_moves_on()
    assert healer.poll() is None and len(started) == 1 and inc.worker_inbox[0] == 0
    assert healer.take(failure) is None  # its inbox moves from spare 0 to spare 1
    inc.ack[0] = inc.gen  # the learner moved on; the new worker (slot 1) has not acknowledged yet
    assert healer.poll() is None and len(started) == 2 and inc.worker_inbox[0] == 1
    assert not healer.free and [spare for spare, _, _ in healer.retired] == [0]  # spare 0 is not back yet
    assert healer.take(failure) is None and healer.waiting
    assert healer.poll() is None and len(started) == 2  # still waiting, and the run goes on
    everyone_moves_on()
    assert healer.poll() is None and not healer.waiting and inc.worker_inbox[0] == 0  # spare 0 renewed, taken
    everyone_moves_on()
    assert healer.poll() is None and len(started) == 3
