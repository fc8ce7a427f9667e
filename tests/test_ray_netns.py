"""--backend=ray across two hosts that are real to Ray: two network namespaces joined by a veth pair that `tc netem`
limits to 1 Gbit/s with 0.2 ms delay, made and removed by `python -m sf.bench.ray_cluster --hosts=netns`, which runs
the CartPole suite there, local and ray side by side."""

import json
import os
import shutil
import signal
import subprocess
import sys

import pytest
from conftest import ROOT, read_until, shm_leaked

pytestmark = pytest.mark.slow


def _namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


@pytest.fixture(scope="module")
def netns_tools():
    """Root, iproute2 and a kernel that lets root make network namespaces and veth pairs."""
    if os.geteuid() != 0:
        pytest.skip("needs root: it creates network namespaces and a veth pair")
    if not (shutil.which("ip") and shutil.which("tc")):
        pytest.skip("needs iproute2 (`ip`, `tc`)")
    probe = f"sf_probe_{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot create a network namespace here: {made.stderr.strip()}")
    try:
        pair = subprocess.run(
            ["ip", "-n", probe, "link", "add", "name", "p0", "type", "veth", "peer", "name", "p1"],
            capture_output=True,
            text=True,
        )
        if pair.returncode != 0:
            pytest.skip(f"cannot create a veth pair here: {pair.stderr.strip()}")
        netem = subprocess.run(
            ["tc", "-n", probe, "qdisc", "add", "dev", "p0", "root", "netem", "rate", "1gbit", "delay", "0.2ms"],
            capture_output=True,
            text=True,
        )
        yield netem.returncode == 0, netem.stderr.strip()
    finally:
        subprocess.run(["ip", "netns", "del", probe], check=True)


@pytest.fixture(scope="module")
def netem(netns_tools):
    """The shaping the acceptance asks for: `tc netem` with a rate and a delay."""
    available, error = netns_tools
    if not available:
        pytest.skip(
            f"the kernel has no netem queueing discipline (CONFIG_NET_SCH_NETEM): `tc ... netem` says {error!r}"
        )


def _bench(*extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "sf.bench.ray_cluster", "--suite=cartpole", "--hosts=netns", *extra],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )


def _slot_bytes_per_frame() -> float:
    """Trajectory bytes per env frame of the CartPole suite, computed from its buffer layout."""
    from sf.bench.suites import SUITES
    from sf.cfg.arguments import parse_full_cfg
    from sf.envs.gym_family import register_gym_env
    from sf.runner.build import build_buffers, build_model, probe_env

    register_gym_env("CartPole-v1")
    cfg = parse_full_cfg(list(SUITES["cartpole"].flags))
    info = probe_env(cfg)
    buffers = build_buffers(cfg, info, build_model(cfg, info, "cpu").rnn_state_size, shared=False)
    return sum(t[0].numel() * t.element_size() for t in buffers.all_tensors()) / (cfg.rollout * info.frameskip)


def test_cartpole_suite_across_two_namespaces(netem, tmp_path, shm_before):
    before = _namespaces()
    out = tmp_path / "netns.json"
    proc = _bench("--frames=40000", "--rounds=1", f"--out={out}")
    text, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, text[-4000:]
    result = json.loads(out.read_text())
    assert result["link"] == "veth, netem rate 1gbit delay 0.2ms each way"
    (ray_run,) = result["ray"]
    assert ray_run["frames"] >= 40_000
    # every frame the learner counted crossed from the other namespace, each trajectory as one whole slot
    assert ray_run["transfer"]["frames_sent"] >= 40_000
    assert result["bytes_per_frame"] == pytest.approx(_slot_bytes_per_frame())
    # and over the pair: the link carried at least the trajectories' bytes towards the driver
    assert ray_run["wire"]["to_driver"] >= ray_run["transfer"]["bytes_sent"]
    assert result["link_bytes_per_frame"] >= result["bytes_per_frame"]
    assert 0 < result["ratio"][0] and 0 < result["steady_ratio"][0]
    assert _namespaces() == before
    assert not shm_leaked(shm_before)


def test_a_terminated_benchmark_removes_what_it_made(netns_tools, tmp_path, shm_before):
    before = _namespaces()
    proc = _bench("--frames=10000000", "--rounds=1")
    lines: list[str] = []
    try:
        read_until(proc, r"^cluster: netns", lines)
        assert len(_namespaces() - before) == 2  # the head's and the second node's
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode != 0
    assert _namespaces() == before  # the pair went with them
    assert not shm_leaked(shm_before)
