"""Component processes are forked from a server that imported torch and sf once, and start as the runner's own
settings say: SIGINT and SIGTERM blocked, one math thread in the rollout workers; the server goes with the run."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import alive, read_until, run_sf, shm_leaked, start_sf, started_pids

from sf.envs.registry import RegistrySnapshot
from sf.supervision.process_start import BASE_PRELOAD, component_context, preload_modules, server_pids, stop_server


def _factory_of(module: str):
    def make(*args):
        return None

    make.__module__ = module
    return make


def test_the_server_preloads_sf_and_the_modules_that_registered_the_envs():
    factories = {
        "doom_basic": _factory_of("sf_examples.vizdoom.doom_envs"),
        "mine": _factory_of("__main__"),
        "doom_health": _factory_of("sf_examples.vizdoom.doom_envs"),
        "ant": _factory_of("my.mujoco_envs"),
    }
    vector_factories = {"ant": _factory_of("my.envpool_mujoco")}
    assert preload_modules(RegistrySnapshot(factories, vector_factories)) == [
        *BASE_PRELOAD,
        "my.envpool_mujoco",
        "my.mujoco_envs",
        "sf_examples.vizdoom.doom_envs",
    ]


def _status_mask(pid: int, field: str) -> int:
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(rf"^{field}:\s*([0-9a-f]+)$", text, re.M).group(1), 16)


def _cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def _environ(pid: int) -> dict[str, str]:
    pairs = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(p.decode().split("=", 1) for p in pairs if b"=" in p)


def test_components_are_forked_from_one_server_with_the_runners_settings(tmp_path, shm_before):
    proc = start_sf(
        [
            "--env=CartPole-v1",
            "--use_rnn=False",
            "--encoder_mlp_layers",
            "32",
            "--num_workers=2",
            "--num_envs_per_worker=4",
            "--inference_placement=own_process",
            "--train_for_env_steps=100000000",
            "--experiment=forked",
            f"--train_dir={tmp_path}",
        ],
        new_session=False,
        env={"PYTHONUNBUFFERED": "1", "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "4"},
    )
    lines: list[str] = []
    try:
        read_until(proc, r"Total num frames: [1-9]", lines)
        pids = started_pids(lines)
        assert set(pids) == {"Learner 0", "InferenceWorker_p0-w0", "RolloutWorker_w0", "RolloutWorker_w1"}
        servers = {int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]) for pid in pids.values()}
        assert len(servers) == 1
        server = servers.pop()
        assert server != proc.pid and "forkserver" in _cmdline(server)
        blocked = (1 << (signal.SIGINT - 1)) | (1 << (signal.SIGTERM - 1))
        for name, pid in pids.items():
            assert "forkserver" in _cmdline(pid), name  # forked from the server, not a fresh interpreter
            assert _status_mask(pid, "SigBlk") & blocked == blocked, name
            assert _environ(pid)["OMP_NUM_THREADS"] == "1", name  # --force_envs_single_thread (the default)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0
    assert not alive(server) and all(not alive(pid) for pid in pids.values())
    assert not shm_leaked(shm_before)


def _leave_a_process_behind(pids) -> None:
    """A component that starts a program without closing its descriptors (as VizDoom does), then dies."""
    pids.put(subprocess.Popen(["sleep", "120"], close_fds=False).pid)


def test_a_process_left_behind_cannot_keep_the_server_from_stopping():
    ctx = component_context(["os"], single_thread=False)
    pids = ctx.Queue()
    component = ctx.Process(target=_leave_a_process_behind, args=(pids,))
    component.start()
    left_behind = pids.get(timeout=60)
    component.join(timeout=60)
    try:
        assert alive(left_behind) and server_pids()
        started = time.monotonic()
        stop_server(timeout_s=1.0)  # the sleep holds the server's "alive" pipe: it would wait 120 s
        assert time.monotonic() - started < 10
        assert not server_pids()
    finally:
        os.kill(left_behind, signal.SIGKILL)


def test_the_module_run_as_main_is_left_to_each_child():
    """`python -m sf_examples.multi_agent.train_multi_agent`: its family imported it again under its own name to
    register the envs; preloaded in the server, each child's runpy would find it imported before running it."""
    factories = {"cue_duel": _factory_of("sf_examples.multi_agent.train_multi_agent"), "ant": _factory_of("my.envs")}
    main = "sf_examples.multi_agent.train_multi_agent"
    assert preload_modules(RegistrySnapshot(factories, {}), main_module=main) == [*BASE_PRELOAD, "my.envs"]


@pytest.mark.slow  # preload_modules leaving out the main module is checked without a run above
def test_a_parallel_run_of_an_example_module_prints_no_runpy_warning(tmp_path):
    args = ["--env=cue_duel", "--num_workers=2", "--train_for_env_steps=3000", "--save_every_sec=3600"]
    result = run_sf(
        [*args, f"--train_dir={tmp_path}", "--experiment=duel"], module="sf_examples.multi_agent.train_multi_agent"
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "started RolloutWorker_w1" in output and "RuntimeWarning" not in output, output[-3000:]
