"""A run removes from /dev/shm only the names it made, whatever else appears there while it runs and however it ends."""

from __future__ import annotations

import mmap
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import CARTPOLE_LAYOUT, ROOT, read_until, shm_leaked, started_pids

from sf.supervision.orphans import start_time, unlink_unused
from sf.supervision.shm_names import (
    CLAIM_WINDOW_S,
    LEDGER_FILE,
    Ledger,
    named_after,
    new_ledger,
    remove_private_dir,
)

ENV = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
FAST = [*CARTPOLE_LAYOUT, "--heartbeat_timeout_sec=5"]


def _shm(name: str) -> Path:
    """A file of this test's in /dev/shm: `foreign` in its name, as every file a test makes there on purpose, so that
    the leak checks of tests running beside it leave it out (conftest.shm_leaked)."""
    return Path("/dev/shm") / f"{name}foreign_{os.getpid()}"


@pytest.fixture
def foreign(tmp_path):
    """Files of other programs, made while a run goes on: none of them may be touched. Made by `make()`."""
    paths: list[Path] = []
    holders: list[subprocess.Popen] = []

    def make() -> list[Path]:
        new, old = _shm("sf_test_foreign_new_"), _shm("sf_test_foreign_old_")
        held = _shm("sf_test_foreign_held_")
        other_run = [
            Path(f"/dev/shm/torch_{os.getpid()}_foreign_0"),  # named after a live process that is no part of the run
            Path(f"/dev/shm/pym-{os.getpid()}-foreign"),
            _shm("ViZDoomSMforeign"),  # another VizDoom program's
            _shm("sem.mp-foreign"),
        ]
        for path in [new, old, held, *other_run]:
            path.write_bytes(b"not the run's")
            paths.append(path)
        os.utime(old, (946_684_800, 946_684_800))  # copied in with its old time (2000-01-01)
        holders.append(
            subprocess.Popen(
                [sys.executable, "-c", "import sys, time; f = open(sys.argv[1]); time.sleep(600)", str(held)]
            )
        )
        return list(paths)

    yield make
    for proc in holders:
        proc.kill()
        proc.wait()
    for path in paths:
        path.unlink(missing_ok=True)


def _session(sid: int) -> list[int]:
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            text = entry.joinpath("stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        if int(fields[3]) == sid and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def _guard_of(pid: int) -> dict[int, Path]:
    """The run's guard (a session of its own, found by its command line) -> the ledger it was handed."""
    found = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            cmd = entry.joinpath("cmdline").read_bytes().decode().split("\0")
        except OSError:
            continue
        if cmd[1:4] == ["-m", "sf.supervision.guard", str(pid)]:
            found[int(entry.name)] = Path(cmd[4])
    return found


def _wait_gone(sid: int, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while _session(sid) or _guard_of(sid):
        assert time.monotonic() < deadline, f"the run's processes are still there: {_session(sid)} {_guard_of(sid)}"
        time.sleep(0.1)


@pytest.mark.parametrize(
    "ending",
    # every process at once is the large chaos matrix's `sigkill_group` too; what it leaves is what main_killed leaves
    ["normal", "learner_killed", "main_killed", pytest.param("group_killed", marks=pytest.mark.slow)],
)
def test_foreign_files_survive_every_ending_and_the_runs_own_are_removed(tmp_path, foreign, planted_cleanup, ending):
    before = set(os.listdir("/dev/shm"))
    steps = 20_000 if ending == "normal" else 100_000_000
    proc = subprocess.Popen(
        [sys.executable, "-m", "sf_examples.train_gym_env", *FAST, f"--train_for_env_steps={steps}"]
        + [f"--train_dir={tmp_path}", "--experiment=own"],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    try:
        read_until(proc, r"started RolloutWorker_w1 pid=", lines)
        made = foreign()
        (ledger,) = set(_guard_of(proc.pid).values())
        private = ledger.parent
        assert private.is_dir()
        made += _plant(ledger)
        if ending != "normal":
            read_until(proc, r"Fps is", lines)
        if ending == "learner_killed":
            os.kill(started_pids(lines)["Learner 0"], signal.SIGKILL)
        elif ending == "main_killed":
            os.kill(proc.pid, signal.SIGKILL)
        elif ending == "group_killed":
            os.killpg(proc.pid, signal.SIGKILL)
        rest, _ = proc.communicate(timeout=120)
        _wait_gone(proc.pid)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    out = "".join(lines) + rest
    assert proc.returncode == {"normal": 0, "learner_killed": 1}.get(ending, -signal.SIGKILL), out[-3000:]
    assert all(path.exists() for path in made), [str(path) for path in made if not path.exists()]
    assert not shm_leaked(before | {path.name for path in made}), out[-3000:]
    assert "/dev/shm file(s) of the run were left" not in out
    assert not private.exists()
    if ending == "normal":
        assert "ignored 3 line(s) that are not /dev/shm names of the run's kinds" in out, out[-3000:]


def _plant(ledger: Path) -> list[Path]:
    """Lines a run's ledger must never be trusted with, added during the run as another program could: a file in the
    temporary folder, a /dev/shm name of no kind the run makes, one reached through `..`. Their files must survive."""
    planted = [
        Path(tempfile.gettempdir()) / f"sf_test_planted_{os.getpid()}",
        _shm("sf_test_planted_"),
        Path(tempfile.gettempdir()) / f"sf_test_planted_dots_{os.getpid()}",
    ]
    for path in planted:
        path.write_bytes(b"not the run's")
    lines = [str(planted[0]), str(planted[1]), f"/dev/shm/../{Path(planted[2]).relative_to('/')}"]
    with open(ledger, "a") as file:
        file.write("".join(f"{line}\n" for line in lines))
    return planted


@pytest.fixture
def planted_cleanup():
    yield
    for path in [*Path(tempfile.gettempdir()).glob(f"sf_test_planted*_{os.getpid()}"), _shm("sf_test_planted_")]:
        path.unlink(missing_ok=True)


def test_the_ledger_records_what_this_process_made_in_its_block_and_not_what_others_made(tmp_path):
    ledger = Ledger(tmp_path / "names", kinds=("sf_test_ledger_*",))
    mine, theirs = _shm("sf_test_ledger_mine_"), _shm("sf_test_ledger_theirs_")
    try:
        with ledger.recording():
            mine.write_bytes(b"\0" * 4096)
            fd = os.open(mine, os.O_RDWR)
            mapped = mmap.mmap(fd, 4096)  # held, as an engine holds its shared memory
            subprocess.run([sys.executable, "-c", f"open({str(theirs)!r}, 'w').write('x')"], check=True)
        assert ledger.names() == {str(mine)}
        mapped.close()
        os.close(fd)
    finally:
        mine.unlink(missing_ok=True)
        theirs.unlink(missing_ok=True)


def test_an_unsettled_claim_takes_the_matching_names_made_since_it_began(tmp_path):
    """A process killed while its envs start cannot record their engines' names: its claim stands for them."""
    ledger = Ledger(tmp_path / "names", kinds=("sf_test_claim*",))
    older, newer, other = _shm("sf_test_claimA_"), _shm("sf_test_claimB_"), _shm("sf_test_unclaimed_")
    try:
        older.write_bytes(b"x")
        os.utime(older, (946_684_800, 946_684_800))
        os.utime(older)  # a status change now would make it look new: its ctime is when it was written
        time.sleep(0.05)
        ledger._append([f"claim 1@{time.time():.3f} sf_test_claim*\n"])
        newer.write_bytes(b"x")
        other.write_bytes(b"x")
        assert ledger.names() == {str(newer)}
        ledger._append(["settled 1@0\n"])  # another claim's end: this one stays open
        assert ledger.names() == {str(newer)}
        claim = ledger.path.read_text().split()[1]
        ledger._append([f"settled {claim}\n"])
        assert ledger.names() == set()
    finally:
        for path in (older, newer, other):
            path.unlink(missing_ok=True)


def test_names_after_a_pid_belong_to_that_process_only_if_it_is_not_younger_than_the_name():
    made = Path(f"/dev/shm/torch_{os.getpid()}_foreign777_0")
    made.write_bytes(b"x")
    try:
        me = {os.getpid(): start_time(os.getpid())}
        assert str(made) in named_after(me)
        assert str(made) not in named_after({os.getpid() + 1: start_time(os.getpid())})
        time.sleep(0.1)
        later = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:  # a process started after the file was made (as one that reused the pid would be) did not make it
            assert str(made) not in named_after({os.getpid(): start_time(later.pid)})
        finally:
            later.kill()
            later.wait()
    finally:
        made.unlink(missing_ok=True)


@pytest.mark.parametrize("replaced", ["mode", "symlink", "other_folder", "gone"])
def test_a_private_folder_replaced_or_gone_removes_nothing_it_lists_and_says_so(tmp_path, caplog, replaced):
    """A temp cleaner removed the run's folder during a long run and someone made one in its place (or loosened it):
    the ledger read there is not the run's, so none of its names is taken, and the folder is left as it is."""
    made = _shm("sf_test_private_")
    made.write_bytes(b"x")
    ledger = new_ledger(("sf_test_private_*",))
    folder = ledger.path.parent
    try:
        ledger.add([str(made)])
        assert ledger.names() == {str(made)}  # trusted as it was made
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir(mode=0o700)
        (elsewhere / LEDGER_FILE).write_text(f"{made}\n")
        if replaced == "mode":
            folder.chmod(0o755)
        elif replaced == "gone":
            shutil.rmtree(folder)
        else:
            shutil.rmtree(folder)
            if replaced == "symlink":
                folder.symlink_to(elsewhere)
            else:
                folder.mkdir(mode=0o700)
                (folder / LEDGER_FILE).write_text(f"{made}\n")
        assert ledger.names() == set()
        assert "none of the /dev/shm names it lists is removed" in caplog.text
        assert unlink_unused(ledger.names() | named_after({})) == [] and made.exists()
        remove_private_dir(ledger)
        assert (elsewhere / LEDGER_FILE).exists()
        assert os.path.lexists(folder) == (replaced != "gone")
    finally:
        made.unlink(missing_ok=True)
        if folder.is_symlink():
            folder.unlink()
        elif folder.exists():
            folder.chmod(0o700)
            shutil.rmtree(folder)


def test_an_env_start_that_raises_settles_its_claim(tmp_path):
    """The claim of an env start that failed must not take a segment another program makes afterwards."""
    ledger = new_ledger(("sf_test_raise_*",))
    later = _shm("sf_test_raise_")
    try:
        with pytest.raises(RuntimeError), ledger.recording(("sf_test_raise_*",)):
            raise RuntimeError("the engine did not start")
        assert ledger.path.read_text().split()[0:1] == ["claim"] and "settled" in ledger.path.read_text()
        subprocess.run([sys.executable, "-c", f"open({str(later)!r}, 'w').write('x')"], check=True)
        assert ledger.names() == set()
        assert unlink_unused(ledger.names()) == [] and later.exists()
    finally:
        later.unlink(missing_ok=True)
        remove_private_dir(ledger)


def test_a_claim_stands_only_for_names_made_within_its_window_and_of_the_runs_kinds(tmp_path, caplog):
    ledger = Ledger(tmp_path / "names", kinds=("sf_test_window_*",))
    inside, outside, other = _shm("sf_test_window_in_"), _shm("sf_test_window_out_"), _shm("sf_test_not_a_kind_")
    try:
        ledger._append([f"claim 1@{time.time() - CLAIM_WINDOW_S - 5:.3f} sf_test_window_*\n"])  # its process died
        outside.write_bytes(b"x")  # long after that claim began: another program's
        assert ledger.names() == set()
        time.sleep(0.05)  # the ctime of the next file is later than the next claim's start
        ledger._append([f"claim 2@{time.time():.3f} sf_test_window_* sf_test_not_a_kind*\n"])
        inside.write_bytes(b"x")
        other.write_bytes(b"x")
        assert ledger.names() == {str(inside)}
        assert "claim of sf_test_not_a_kind*" in caplog.text
    finally:
        for path in (inside, outside, other):
            path.unlink(missing_ok=True)
