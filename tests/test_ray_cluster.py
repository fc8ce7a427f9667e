"""--backend=ray on a two-node cluster simulated on this machine (a head node and a second node with its own
resources and object store, both on the loopback interface), started once for the module."""

import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # before Ray is imported: nodes bind to 127.0.0.1 only
ray_cluster_utils = pytest.importorskip("ray.cluster_utils")

from conftest import LAYOUT, ROOT, alive, read_until, run_sf, shm_leaked, start_sf, started_pids  # noqa: E402

STORE_BYTES = 150 * 1024**2
SECOND = "sf_test_node2"  # custom resource of the second node: pins rollout workers there
FAST = [*LAYOUT, "--backend=ray", f"--ray_worker_groups={SECOND}:2"]


@pytest.fixture(scope="module")
def cluster():
    c = ray_cluster_utils.Cluster(
        initialize_head=True,
        connect=False,
        head_node_args=dict(num_cpus=1, object_store_memory=STORE_BYTES, include_dashboard=False),
    )
    second = c.add_node(num_cpus=1, resources={SECOND: 4}, object_store_memory=STORE_BYTES)
    try:
        c.wait_for_nodes()
        yield c, c.head_node.node_id, second.node_id
    finally:
        c.shutdown()


def _json(path) -> dict:
    return json.loads(path.read_text())


def _slot_bytes() -> int:
    """Bytes of one trajectory slot of the buffers a run with LAYOUT builds, computed here from the layout."""
    from sf.cfg.arguments import parse_full_cfg
    from sf.envs.gym_family import register_gym_env
    from sf.runner.build import build_buffers, build_model, probe_env

    register_gym_env("CartPole-v1")
    cfg = parse_full_cfg(["--env=CartPole-v1", *LAYOUT])
    info = probe_env(cfg)
    buffers = build_buffers(cfg, info, build_model(cfg, info, "cpu").rnn_state_size, shared=False)
    return sum(t[0].numel() * t.element_size() for t in buffers.all_tensors())


@pytest.mark.slow  # 30 s with the cluster's start: the Ray backend is tested under make test-slow
def test_rollout_workers_on_the_second_node_show_in_profile(cluster, tmp_path, shm_before):
    c, head, second = cluster
    result = run_sf(
        [
            "--env=CartPole-v1",
            *FAST,
            "--train_for_env_steps=40000",  # the second node's workers start late: long enough for two snapshots
            "--experiment=two",
            f"--train_dir={tmp_path}",
            f"--ray_address={c.address}",
        ],
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    summary = _json(tmp_path / "two" / "summary.json")
    profile = _json(tmp_path / "two" / "profile.json")
    assert summary["status"] == "ok" and summary["env_frames"]["0"] >= 12000
    assert {entry["node"]["ray_node_id"] for entry in profile.values()} == {head, second}
    workers = [name for name in profile if name.startswith("RolloutWorker")]
    assert sorted(workers) == ["RolloutWorker_w0", "RolloutWorker_w1"]
    assert all(profile[name]["node"]["ray_node_id"] == second for name in workers)
    # on a loaded machine one worker may start so late that the other steps every env frame of a short run
    assert sum(profile[name]["tree"].get("env_step", {"time": 0.0})["time"] for name in workers) > 0
    for name in ("Runner", "Learner 0", "Batcher 0"):
        assert profile[name]["node"]["ray_node_id"] == head
    agent = profile["NodeAgent_1"]
    assert agent["node"]["ray_node_id"] == second
    # sf.profile top groups the components by node: the rollout workers and the agent under the second one
    from sf.analysis.top import ReplaySource, frame_text

    lines = frame_text(ReplaySource(tmp_path / "two", speed=1.0, at=math.inf).frame(4.0), height=40).splitlines()
    headers = [i for i, line in enumerate(lines) if line.startswith("node ")] + [len(lines)]
    assert len(headers) == 3, "\n".join(lines)
    under = {
        lines[a].split()[-1]: {" ".join(line.split()[:2]) for line in lines[a + 1 : b]}
        for a, b in zip(headers, headers[1:])
    }
    assert {"Rollout w0", "Rollout w1"} <= under[second[:8]] and "Learner 0" in under[head[:8]], "\n".join(lines)
    assert {"gather", "update_weights"} <= set(agent["tree"])
    transfer = agent["transfer"]
    # chunks of at most a training iteration's worth of trajectories (the CartPole example's 2 batches: 16)
    cfg = _json(tmp_path / "two" / "config.json")
    per_chunk = cfg["batch_size"] * cfg["num_batches_per_epoch"] // cfg["rollout"]
    assert transfer["chunks_sent"] * per_chunk >= transfer["trajectories_sent"] > 0
    # every frame the learner counted crossed from the second node, each trajectory as one whole slot
    assert transfer["frames_sent"] >= summary["env_frames"]["0"]
    assert transfer["frames_sent"] == transfer["trajectories_sent"] * 32
    assert transfer["bytes_sent"] == transfer["trajectories_sent"] * _slot_bytes()
    # the initial weights and newer ones arrived, never more than one update per version the learner made
    assert 2 <= transfer["weight_updates"] <= summary["policy_versions"]["0"] + 1
    assert all(not alive(pid) for pid in started_pids(result.stdout.splitlines()).values())
    assert not shm_leaked(shm_before)


def _kill_during_run(cluster, tmp_path, experiment: str, extra: list[str], train_for: int):
    c, _, _ = cluster
    proc = start_sf(
        [
            "--env=CartPole-v1",
            *FAST,
            *extra,
            f"--train_for_env_steps={train_for}",
            f"--experiment={experiment}",
            f"--train_dir={tmp_path}",
            f"--ray_address={c.address}",
        ],
        new_session=False,
    )
    lines: list[str] = []
    try:
        read_until(proc, r"Total num frames: [1-9]", lines)
        pids = started_pids(lines)
        os.kill(pids["NodeAgent_1"], signal.SIGKILL)
        killed_at = time.monotonic()
        rest, _ = proc.communicate(timeout=180)
        took = time.monotonic() - killed_at
    finally:
        proc.kill()
    out = "".join(lines) + rest
    return proc.returncode, out, took, pids


@pytest.mark.slow
def test_with_restarts_off_a_killed_agent_ends_the_run(cluster, tmp_path, shm_before):
    code, out, took, pids = _kill_during_run(cluster, tmp_path, "kill", ["--ray_max_restarts=0"], 100_000_000)
    assert code != 0
    assert took < 15, took
    summary = _json(tmp_path / "kill" / "summary.json")
    _, _, second = cluster
    assert summary["status"] == "error"
    assert summary["error"].startswith("NodeAgent_1 on node ") and second[:8] in summary["error"]
    assert "Learner 0 profile tree view:" in out
    assert all(not alive(pid) for pid in pids.values())
    assert not shm_leaked(shm_before)


@pytest.mark.slow
def test_lost_agent_is_restarted_and_the_run_finishes(cluster, tmp_path, shm_before):
    code, out, _, pids = _kill_during_run(cluster, tmp_path, "restart", ["--ray_max_restarts=1"], 40_000)
    assert code == 0, out[-3000:]
    summary = _json(tmp_path / "restart" / "summary.json")
    assert summary["status"] == "ok" and summary["env_frames"]["0"] >= 40_000
    assert summary["node_restarts"] == 1
    profile = _json(tmp_path / "restart" / "profile.json")
    assert profile["NodeAgent_1"]["pid"] != pids["NodeAgent_1"]  # the final tree is the new agent's
    assert profile["NodeAgent_1"]["transfer"]["weight_updates"] >= 1
    assert all(not alive(pid) for pid in started_pids(out.splitlines()).values())
    assert all(not alive(pid) for pid in pids.values())
    assert not shm_leaked(shm_before)


@pytest.mark.slow
def test_a_lost_nodes_workers_move_to_a_node_left_and_the_run_ends_cleanly_once_none_is(cluster, tmp_path):
    """Two extra nodes offer the resource the workers are pinned to: the node running them is removed (its agent and
    processes die with it), the agent starts again on the other; that one removed too, no node is left for them, and
    the run ends with the reason in one line."""
    c, _, _ = cluster
    movable = "sf_test_movable"
    nodes = {}
    for _ in range(2):
        node = c.add_node(num_cpus=1, resources={movable: 4}, object_store_memory=STORE_BYTES)
        nodes[node.node_id[:8]] = node
    c.wait_for_nodes()
    proc = subprocess.Popen(
        [sys.executable, "-m", "sf_examples.train_gym_env", "--env=CartPole-v1", *LAYOUT, "--backend=ray",
         f"--ray_worker_groups={movable}:2", "--train_for_env_steps=100000000", "--experiment=lost",
         f"--train_dir={tmp_path}", f"--ray_address={c.address}"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )  # fmt: skip
    lines: list[str] = []
    try:
        first = read_until(proc, r"started NodeAgent_1 pid=\d+ on node .* \((\w{8})\)", lines).group(1)
        read_until(proc, r"Total num frames: [1-9]", lines)
        c.remove_node(nodes.pop(first))
        second = read_until(proc, r"started NodeAgent_1 pid=\d+ on node .* \((\w{8})\)", lines).group(1)
        assert second in nodes
        read_until(proc, r"Total num frames: [1-9]", lines)
        c.remove_node(nodes.pop(second))
        rest, _ = proc.communicate(timeout=240)
    finally:
        proc.kill()
        for node in nodes.values():
            c.remove_node(node)
    out = "".join(lines) + rest
    assert proc.returncode == 1, out[-3000:]
    summary = _json(tmp_path / "lost" / "summary.json")
    assert summary["node_restarts"] >= 1
    assert f"no node left offers the resource {movable} for the workers of NodeAgent_1" in summary["error"]


@pytest.mark.slow
def test_cartpole_learns_with_every_rollout_worker_on_the_second_node(cluster, tmp_path):
    """The parallel CartPole acceptance command and bar (tests/test_parallel_run.py), workers on the second node."""
    c, _, second = cluster
    result = run_sf(
        [
            "--env=CartPole-v1",
            "--num_workers=2",
            "--num_envs_per_worker=8",
            "--train_for_env_steps=300000",
            "--seed=1",
            "--experiment=learn",
            f"--train_dir={tmp_path}",
            "--backend=ray",
            f"--ray_worker_groups={SECOND}:2",
            f"--ray_address={c.address}",
        ],
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    assert _json(tmp_path / "learn" / "summary.json")["avg_episode_reward"]["0"] >= 450
    profile = _json(tmp_path / "learn" / "profile.json")
    assert all(e["node"]["ray_node_id"] == second for name, e in profile.items() if name.startswith("RolloutWorker"))


@pytest.mark.slow
def test_profiler_outputs_and_timeline_of_remote_processes_reach_the_driver(cluster, tmp_path):
    c, _, _ = cluster
    result = run_sf(
        [
            "--env=CartPole-v1",
            *FAST,
            "--train_for_env_steps=6000",
            "--experiment=prof",
            f"--train_dir={tmp_path}",
            f"--ray_address={c.address}",
            "--profiling_backend=cprofile",
            "--profiling_worker_groups",
            "RolloutWorker",
            "--profiling_timeline=True",
        ],
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    folder = tmp_path / "prof" / "profiling"
    for worker in ("RolloutWorker_w0", "RolloutWorker_w1"):
        assert list(folder.glob(f"{worker}*.prof")), sorted(p.name for p in folder.iterdir())
    trace = _json(folder / "timeline.json")
    tracks = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"}
    assert {"RolloutWorker_w0", "RolloutWorker_w1", "Learner 0"} <= tracks


@pytest.mark.slow
def test_sync_mode_trains_on_current_policy_only_across_nodes(cluster, tmp_path):
    """A node tells its workers of a new version only once it runs that version's weights."""
    c, _, _ = cluster
    result = run_sf(
        [
            "--env=CartPole-v1",
            *FAST,
            "--async_rl=False",
            "--train_for_env_steps=6000",
            "--experiment=sync",
            f"--train_dir={tmp_path}",
            f"--ray_address={c.address}",
        ],
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    summary = _json(tmp_path / "sync" / "summary.json")
    assert summary["policy_versions"]["0"] >= 5 and summary["max_policy_lag"]["0"] == 0.0
    transfer = _json(tmp_path / "sync" / "profile.json")["NodeAgent_1"]["transfer"]
    assert transfer["weight_updates"] >= summary["policy_versions"]["0"]  # every version reached the node


@pytest.mark.slow
def test_a_killed_driver_ends_the_node_agents_and_their_processes(cluster, tmp_path, shm_before):
    """SIGKILL of the driver: Ray ends the actors it owned, each node agent's processes stop by themselves when their
    agent is gone, the driver's own components when the driver is."""
    c, _, _ = cluster
    proc = subprocess.Popen(
        [sys.executable, "-m", "sf_examples.train_gym_env", "--env=CartPole-v1", *FAST,
         "--train_for_env_steps=100000000", "--experiment=driver", f"--train_dir={tmp_path}",
         f"--ray_address={c.address}"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
        start_new_session=True,
    )  # fmt: skip
    lines: list[str] = []
    try:
        read_until(proc, r"Total num frames: [1-9]", lines)
        pids = started_pids(lines)
        assert {"NodeAgent_1", "RolloutWorker_w0", "RolloutWorker_w1", "Learner 0"} <= set(pids)
        proc.kill()
        killed_at = time.monotonic()
        proc.wait()
        while any(alive(pid) for pid in pids.values()) and time.monotonic() - killed_at < 30:
            time.sleep(0.1)
        took = time.monotonic() - killed_at
    finally:
        proc.kill()
    assert all(not alive(pid) for pid in pids.values()), {n: p for n, p in pids.items() if alive(p)}
    assert took < 15, took
    assert not shm_leaked(shm_before)


@pytest.mark.slow
def test_a_multi_agent_env_on_the_second_node(cluster, tmp_path, shm_before):
    """Each agent's slots cross from the second node whole, their activity with them: the learner masks the resting
    agent's steps (1 in 8 of all) as in a local run, and every agent's frames and episodes count."""
    from conftest import read_scalars

    c, _, second = cluster
    result = run_sf(
        [
            "--env=cooperative_cue_resting",
            "--backend=ray",
            f"--ray_worker_groups={SECOND}:2",
            "--num_workers=2",
            "--train_for_env_steps=20000",
            "--experiment=agents",
            f"--train_dir={tmp_path}",
            f"--ray_address={c.address}",
        ],
        module="sf_examples.multi_agent.train_multi_agent",
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    exp = tmp_path / "agents"
    summary, profile = _json(exp / "summary.json"), _json(exp / "profile.json")
    assert summary["status"] == "ok" and summary["env_frames"]["0"] >= 20000
    assert all(profile[f"RolloutWorker_w{w}"]["node"]["ray_node_id"] == second for w in range(2))
    transfer = profile["NodeAgent_1"]["transfer"]
    assert transfer["frames_sent"] == transfer["trajectories_sent"] * 32 >= summary["env_frames"]["0"]
    assert summary["num_episodes"] * 20 >= summary["env_frames"]["0"] - 20  # an episode of 20 steps per agent
    assert sum(read_scalars(exp)["train/valids_fraction"]) / len(read_scalars(exp)["train/valids_fraction"]) == (
        pytest.approx(7 / 8, abs=0.03)
    )
    assert all(not alive(pid) for pid in started_pids(result.stdout.splitlines()).values())


@pytest.mark.slow
def test_a_model_a_script_registered_is_built_on_the_second_node(cluster, tmp_path, shm_before):
    """The training script written for Sample Factory, run as a program: its encoder and env factory live in its
    `__main__`, which no node can import; they travel by value, and the second node's processes build the encoder."""
    from sample_factory_imports import run_script, write_rewritten_scripts

    c, _, second = cluster
    scripts = write_rewritten_scripts(tmp_path)
    flags = [*FAST, "--inference_placement=rollout_worker", "--train_for_env_steps=20000", f"--ray_address={c.address}"]
    args = ["--env=collect", *flags, f"--train_dir={tmp_path}", "--experiment=custom"]
    result = run_script(scripts / "train_collect.py", args, tmp_path, timeout=300)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    profile = _json(tmp_path / "custom" / "profile.json")
    remote = [
        name
        for name, entry in profile.items()
        if name.startswith("InferenceWorker") and "PoolingEncoder" in json.dumps(entry["tree"])
    ]
    assert remote and all(profile[name]["node"]["ray_node_id"] == second for name in remote)
    assert "PoolingEncoder" in json.dumps(profile["Learner 0"]["tree"])
    assert not shm_leaked(shm_before)


@pytest.mark.slow
def test_a_population_across_two_nodes(cluster, tmp_path, shm_before):
    """Four policies in self-play, a rollout worker on each node: every policy's learner on the driver, each seat's
    experience back to its own policy's learner from both nodes, replaced weights reaching the second node, and every
    policy better than random play against the population."""
    from conftest import read_scalars

    c, head, second = cluster
    result = run_sf(
        [
            "--env=cue_duel",
            "--num_policies=4",
            "--with_pbt=True",
            "--pbt_start_mutation=10000",
            "--pbt_period_env_steps=10000",
            "--backend=ray",
            f"--ray_worker_groups={SECOND}:1",
            "--num_workers=2",
            "--seed=1",
            "--train_for_env_steps=60000",
            "--experiment=population",
            f"--train_dir={tmp_path}",
            f"--ray_address={c.address}",
        ],
        module="sf_examples.multi_agent.train_multi_agent",
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    exp = tmp_path / "population"
    summary, profile = _json(exp / "summary.json"), _json(exp / "profile.json")
    assert summary["status"] == "ok" and all(summary["env_frames"][str(p)] >= 60000 for p in range(4))
    nodes = {name: entry["node"]["ray_node_id"] for name, entry in profile.items()}
    assert {nodes["RolloutWorker_w0"], nodes["RolloutWorker_w1"]} == {head, second}
    assert all(nodes[f"Learner {p}"] == head for p in range(4))
    policies = summary["population"]["policies"]
    assert any(entry["replacements"] for entry in policies.values())
    transfer = profile["NodeAgent_1"]["transfer"]
    assert transfer["trajectories_sent"] > 0 and transfer["weight_updates"] >= 4  # every policy's weights, and newer
    for p in range(4):
        assert read_scalars(exp, p)["policy_stats/avg_true_objective"][-1] >= 0.8  # random play: 0.25
    assert all(not alive(pid) for pid in started_pids(result.stdout.splitlines()).values())
    assert not shm_leaked(shm_before)
