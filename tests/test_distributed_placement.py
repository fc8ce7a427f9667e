"""--backend=ray without a cluster: where workers go, which flags are refused, and what a chunk carries."""

import numpy as np
import pytest

from sf.cfg.arguments import default_cfg
from sf.cfg.validate import parse_worker_groups
from sf.distributed.placement import plan
from sf.utils.errors import ConfigError


def _cfg(**overrides):
    return default_cfg(env="CartPole-v1", **overrides)


def test_default_spread_puts_the_remainder_on_the_first_nodes():
    placement = plan(_cfg(num_workers=7), ["a", "driver", "b"], "driver", set())
    assert placement.local_workers == (0, 1, 2)  # the driver's node first
    assert [(g.workers, g.node_id) for g in placement.groups] == [((3, 4), "a"), ((5, 6), "b")]
    assert [g.name for g in placement.groups] == ["NodeAgent_1", "NodeAgent_2"]


def test_one_node_keeps_every_worker_local():
    placement = plan(_cfg(num_workers=3), ["driver"], "driver", set())
    assert placement.local_workers == (0, 1, 2) and placement.groups == ()


def test_pinned_groups_come_first_then_workers_per_node():
    cfg = _cfg(num_workers=6, ray_worker_groups=["gpu_box:2"], ray_workers_per_node=3)
    placement = plan(cfg, ["driver", "a"], "driver", {"gpu_box"})
    assert placement.groups[0].workers == (0, 1) and placement.groups[0].resource == "gpu_box"
    assert placement.local_workers == (2, 3, 4)
    assert placement.groups[1].workers == (5,) and placement.groups[1].node_id == "a"


def test_too_few_workers_per_node_names_the_flag():
    with pytest.raises(ConfigError, match="--ray_workers_per_node=1"):
        plan(_cfg(num_workers=3, ray_workers_per_node=1), ["driver", "a"], "driver", set())


def test_unknown_resource_names_what_the_cluster_has():
    with pytest.raises(ConfigError, match="'nowhere'.*it has: node2"):
        plan(_cfg(num_workers=2, ray_worker_groups=["nowhere:1"]), ["driver"], "driver", {"node2"})


@pytest.mark.parametrize("spec", ["node2", "node2:0", ":3", "node2:x"])
def test_malformed_worker_group(spec):
    with pytest.raises(ConfigError, match="RESOURCE:COUNT"):
        parse_worker_groups([spec])


@pytest.mark.parametrize(
    "overrides, flag",
    [
        (dict(backend="ray", serial_mode=True, async_rl=False), "--backend"),
        (dict(ray_max_restarts=1, async_rl=False), "--ray_max_restarts"),
        (dict(num_workers=2, ray_worker_groups=["a:2", "b:1"]), "--ray_worker_groups"),
        (dict(ray_transfers_in_flight=0), "--ray_transfers_in_flight"),
    ],
)
def test_invalid_cluster_flags(overrides, flag):
    with pytest.raises(ConfigError) as err:
        _cfg(**overrides)
    assert err.value.flag == flag


def test_chunk_round_trip_restores_trajectories_and_shifts_clocks(monkeypatch):
    """A chunk packed from one node's slots lands in other slots of the driver's buffers unchanged, except the
    trajectory stamps, which move from the node's monotonic clock to the driver's."""
    from sf.distributed import transfer
    from sf.envs.gym_family import register_gym_env
    from sf.runner.build import build_buffers, build_model, probe_env

    register_gym_env("CartPole-v1")
    cfg = _cfg(num_workers=2, num_envs_per_worker=2, rollout=4, batch_size=8, use_rnn=False)
    info = probe_env(cfg)
    rnn = build_model(cfg, info, "cpu").rnn_state_size
    node, driver = build_buffers(cfg, info, rnn, shared=False), build_buffers(cfg, info, rnn, shared=False)
    rng = np.random.default_rng(0)
    for array in [*node.np.values(), *node.obs_np.values()]:
        array[...] = rng.integers(0, 100, size=array.shape)
    monkeypatch.setattr(transfer, "clock_offset", lambda: 1000.0)  # the node's wall clock runs 1000 s ahead...
    chunk = transfer.pack(node, [1, 3])
    monkeypatch.setattr(transfer, "clock_offset", lambda: 400.0)  # ...of its monotonic clock, the driver's 400 s
    transfer.unpack(driver, [5, 0], chunk)
    for key in node.np:
        expected = node.np[key][[1, 3]] + (600.0 if key == "traj_time" else 0)
        np.testing.assert_array_equal(driver.np[key][[5, 0]], expected)
    for key in node.obs_np:
        np.testing.assert_array_equal(driver.obs_np[key][[5, 0]], node.obs_np[key][[1, 3]])
    assert transfer.nbytes(chunk) == 2 * sum(t[0].numel() * t.element_size() for t in node.all_tensors())


def _agent_with_waiting(counts: dict[int, int], waited_s: float, chunk_wait_s: float = 0.05):
    """A node agent (no Ray, no processes) holding `counts` finished trajectories per policy, the oldest of each
    having waited `waited_s`, with chunks of 8."""
    import time

    from sf.distributed.agent import AgentSpec, NodeAgent

    agent = NodeAgent(AgentSpec("NodeAgent_1", (0,), (), _cfg(ray_chunk_wait_s=chunk_wait_s), None, {}, "."))
    agent.chunk_cap = 8
    agent.pending = {p: list(range(n)) for p, n in counts.items()}
    agent.pending_since = {p: time.monotonic() - waited_s for p in counts}
    return agent


def test_a_chunk_leaves_full_or_when_its_oldest_trajectory_has_waited():
    due, wait_s = _agent_with_waiting({0: 3, 1: 8}, waited_s=0.0)._due()
    assert due == [1]  # a batch's worth leaves at once, three trajectories wait for more
    due, wait_s = _agent_with_waiting({0: 3}, waited_s=0.0)._due()
    assert due == [] and 0.03 < wait_s <= 0.05  # and the agent looks again when they will have waited enough
    assert _agent_with_waiting({0: 3}, waited_s=0.06)._due()[0] == [0]
    assert _agent_with_waiting({0: 1}, waited_s=0.0, chunk_wait_s=0.0)._due()[0] == [0]  # 0: every one at once
    assert _agent_with_waiting({0: 0}, waited_s=1.0)._due() == ([], 0.05)  # nothing waiting


def test_a_node_agent_reaches_its_start_without_importing_torch(tmp_path):
    """What a node's Ray worker loads before the agent's `start` runs (the class by reference, its spec by value, the
    model factory inside it as bytes) leaves torch out, so that the agent's fork server, started first in `start`,
    imports torch beside the agent rather than after it."""
    import subprocess
    import sys

    import ray.cloudpickle

    from sf.distributed.agent import AgentSpec, NodeAgent
    from sf.distributed.transfer import portable_model_factory, portable_registry
    from sf.envs.families import family_of
    from sf.envs.registry import RegistrySnapshot, registry_snapshot
    from sf.model.factory import model_factory_snapshot
    from sf.runner.build import probe_env

    cfg = _cfg()
    family_of(cfg.env).register_envs(cfg.env)
    envs = RegistrySnapshot({cfg.env: registry_snapshot().envs[cfg.env]}, {})  # not what other tests registered
    models = portable_model_factory(model_factory_snapshot())
    spec = AgentSpec("NodeAgent_1", (0,), (), cfg, probe_env(cfg), portable_registry(envs), "x", models)
    (tmp_path / "actor.pkl").write_bytes(ray.cloudpickle.dumps((NodeAgent, spec)))
    code = (
        "import sys, ray.cloudpickle; "
        f"cls, spec = ray.cloudpickle.loads(open({str(tmp_path / 'actor.pkl')!r}, 'rb').read()); "
        "assert cls.__name__ == 'NodeAgent' and spec.env_info.frameskip == 1; "
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
