"""Work versus waiting: every component's lifetime is explained by its work scopes, its named waits and the
event loop's overhead, with nothing counted twice."""

import json
import time
from typing import NamedTuple

import pytest
from conftest import CARTPOLE_LAYOUT, read_scalars, run_sf

from sf.runtime.event_loop import Component, EventLoop, StopLoop

FAST = [*CARTPOLE_LAYOUT, "--experiment_summaries_interval=1"]
CANONICAL_WAITS = {
    "Batcher 0": "wait_trajectories",
    "InferenceWorker_p0-w0": "wait_requests",
    "Learner 0": "wait_batch",
    "RolloutWorker_w0": "wait_actions",
    "RolloutWorker_w1": "wait_actions",
}


def _spin(seconds: float) -> None:
    """A known amount of CPU work (not a sleep: the loop must see a busy handler)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class _Ball(NamedTuple):
    hits: int


class _Player(Component):
    """Hits the ball back `rounds` times, working `work_s` per hit inside its `play` scope."""

    def __init__(self, name: str, other: str, work_s: float, rounds: int, wait_key: str):
        super().__init__(name)
        self.other, self.work_s, self.rounds, self.wait_key = other, work_s, rounds, wait_key
        self.handlers = {_Ball: self._on_ball}

    def _on_ball(self, ball: _Ball) -> None:
        with self.timing.add_time("play"):
            _spin(self.work_s)
        if ball.hits >= self.rounds:
            raise StopLoop
        self.send(self.other, _Ball(ball.hits + 1))


def test_components_sharing_a_loop_wait_while_the_other_works():
    loop = EventLoop()
    ping = _Player("ping", "pong", 0.004, 20, "wait_pong")
    pong = _Player("pong", "ping", 0.001, 20, "wait_ping")
    loop.add(ping)
    loop.add(pong)
    loop.send("ping", _Ball(0))
    loop.run()
    profiles = {name: (tree, activity) for name, tree, activity in loop.profiles()}
    ping_tree, ping_act = profiles["ping"]
    pong_tree, pong_act = profiles["pong"]
    # ping's wait is exactly the time the loop spent in pong's handler, and the other way round
    assert ping_act["waits"]["wait_pong"] == pytest.approx(pong.busy_s, rel=1e-6)
    assert pong_act["waits"]["wait_ping"] == pytest.approx(ping.busy_s, rel=1e-6)
    assert ping_tree["play"]["time"] >= 10 * 0.004 and pong_tree["play"]["time"] >= 10 * 0.001
    for act in (ping_act, pong_act):
        assert 0.95 <= (act["work_s"] + act["wait_s"] + act["overhead_s"]) / act["lifetime_s"] <= 1.0 + 1e-6
    # one thread: the two components' work plus the loop's overhead is the whole lifetime
    total = ping_act["work_s"] + pong_act["work_s"] + ping_act["overhead_s"]
    assert total == pytest.approx(ping_act["lifetime_s"], rel=0.05)


def _check_run(profile: dict, serial: bool) -> None:
    for name, wait in CANONICAL_WAITS.items():
        assert wait in profile[name]["tree"], (name, list(profile[name]["tree"]))
    assert "wait_messages" in profile["Runner"]["tree"]["main_loop"]["children"]
    for name, entry in profile.items():
        act = entry["activity"]
        level = entry["tree"]["main_loop"]["children"] if name == "Runner" else entry["tree"]
        assert act["waits"] == {key: node["time"] for key, node in level.items() if key.startswith("wait_")}
        assert act["overhead_s"] == level["loop_overhead"]["time"]
        coverage = (act["work_s"] + act["wait_s"] + act["overhead_s"]) / act["lifetime_s"]
        assert 0.95 <= coverage <= 1.001, (name, act)
        res = entry["resources"]
        assert act["lifetime_s"] <= res["wall_s"] + 0.5
        assert res["cpu_user_s"] > 0 and res["peak_rss_bytes"] > 50 * 2**20
    if serial:
        # every moment of the one loop is one component's work or the loop's own overhead
        loop_parts = [e["activity"] for n, e in profile.items() if n != "Runner"]
        total = (
            sum(a["work_s"] for a in loop_parts) + profile["Runner"]["activity"]["work_s"] + loop_parts[0]["overhead_s"]
        )
        # less what no scope covers: each handler's few lines around its scopes and the scopes' own entry and exit
        # (a few us a message, several % of a small MLP's loop, where a step's work is itself only tens of us)
        assert total == pytest.approx(loop_parts[0]["lifetime_s"], rel=0.08)


@pytest.fixture(scope="module")
def parallel_run(tmp_path_factory):
    """One short parallel CartPole run shared by the tests below: (experiment dir, stdout)."""
    train_dir = tmp_path_factory.mktemp("parallel")
    result = run_sf([*FAST, "--train_for_env_steps=6000", "--experiment=act", f"--train_dir={train_dir}"], timeout=240)
    assert result.returncode == 0, result.stdout[-3000:]
    return train_dir / "act", result.stdout


def test_parallel_run_explains_every_components_lifetime(parallel_run):
    exp, stdout = parallel_run
    profile = json.loads((exp / "profile.json").read_text())
    _check_run(profile, serial=False)
    # Learner and Batcher share a process, and so do each rollout worker and its inference worker (a small model on
    # the CPU): the time one works is the other's wait
    for a, b in (
        ("Learner 0", "Batcher 0"),
        ("RolloutWorker_w0", "InferenceWorker_p0-w0"),
        ("RolloutWorker_w1", "InferenceWorker_p0-w1"),
    ):
        first, second = profile[a]["activity"], profile[b]["activity"]
        assert profile[a]["pid"] == profile[b]["pid"]
        assert first["work_s"] + first["wait_s"] == pytest.approx(second["work_s"] + second["wait_s"], rel=0.05)
    assert len({e["pid"] for e in profile.values()}) == 4
    for name, entry in profile.items():
        res = entry["resources"]
        header = f"{name}: cpu {res['cpu_user_s'] + res['cpu_system_s']:.1f} s of {res['wall_s']:.1f} s, rss "
        assert header in stdout


def test_summary_has_trajectory_age_and_policy_lag(parallel_run):
    exp, _ = parallel_run
    summary = json.loads((exp / "summary.json").read_text())
    hist = summary["policy_lag_hist"]
    assert len(hist["edges"]) == len(hist["counts"]) + 1 and hist["edges"][0] == 0
    config = json.loads((exp / "config.json").read_text())
    # every trained step is counted once: policy versions x steps per training iteration
    assert sum(hist["counts"]) == summary["policy_versions"]["0"] * 256 * config["num_batches_per_epoch"]
    assert max(e for e, c in zip(hist["edges"], hist["counts"]) if c) == summary["max_policy_lag"]["0"]
    age = summary["trajectory_age_s"]
    assert 0 < age["p50"] <= age["p95"] < summary["wall_time_s"]


def test_tensorboard_has_timing_cpu_and_staleness(parallel_run):
    exp, _ = parallel_run
    scalars = read_scalars(exp)
    profile = json.loads((exp / "profile.json").read_text())
    for name in ("Learner 0", "RolloutWorker_w0", "InferenceWorker_p0-w0", "Batcher 0"):
        tag = name.replace(" ", "_")
        assert f"timing/{tag}/cpu_percent" in scalars
        top_level = set(profile[name]["tree"])
        written = {t.split("/", 2)[2] for t in scalars if t.startswith(f"timing/{tag}/")} - {"cpu_percent"}
        assert written and written <= top_level
        assert all(0 <= v <= 100 * 2 + 1 for v in scalars[f"timing/{tag}/cpu_percent"])
    assert "timing/Runner/wait_messages" in scalars
    assert scalars["perf/trajectory_age_p50_s"] and scalars["perf/trajectory_age_p95_s"]
    assert _histogram_tags(exp) == {"perf/policy_lag"}


def _histogram_tags(exp) -> set[str]:
    import struct

    from tensorboardX.proto import event_pb2

    tags = set()
    for path in exp.glob(".summary/*/events.out.tfevents.*"):
        data, at = path.read_bytes(), 0
        while at < len(data):
            (length,) = struct.unpack("<Q", data[at : at + 8])
            event = event_pb2.Event.FromString(data[at + 12 : at + 12 + length])
            at += 12 + length + 4
            tags |= {value.tag for value in event.summary.value if value.HasField("histo")}
    return tags


def test_serial_run_splits_one_process_between_components(tmp_path):
    result = run_sf(
        [
            *FAST,
            "--serial_mode=True",
            "--async_rl=False",
            "--train_for_env_steps=12000",  # a loop of a few seconds: a few ms outside any scope stay under 5 %
            "--experiment=ser",
            f"--train_dir={tmp_path}",
        ],
        timeout=240,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    profile = json.loads((tmp_path / "ser" / "profile.json").read_text())
    _check_run(profile, serial=True)
    assert len({e["pid"] for e in profile.values()}) == 1


def test_age_percentiles_match_the_sample_within_a_bin():
    import numpy as np
    import torch

    from sf.profiling import staleness

    rng = np.random.default_rng(0)
    ages = rng.lognormal(mean=-2.0, sigma=1.5, size=20_000)
    counts: dict[int, int] = {}
    for part in np.array_split(ages, 7):  # batches add up
        staleness.add_counts(counts, staleness.age_counts(torch.from_numpy(part)))
    for q in (0.5, 0.95):
        assert staleness.age_quantile(counts, q) == pytest.approx(np.quantile(ages, q), rel=0.06)


def test_step_ages_interpolate_between_first_and_last_step():
    import torch

    from sf.profiling import staleness

    stamps = torch.tensor([[10.0, 13.0], [11.0, 11.5]], dtype=torch.float64)
    ages = staleness.step_ages(stamps, rollout=4, now=20.0)
    assert ages.tolist() == pytest.approx([10.0, 9.0, 8.0, 7.0, 9.0, 9.0 - 0.5 / 3, 9.0 - 1.0 / 3, 8.5])
    hist = staleness.lag_histogram(staleness.lag_counts(torch.tensor([[0, 2, 2], [3, 0, 2]])))
    assert hist == {"edges": [0, 1, 2, 3, 4], "counts": [2, 0, 3, 1]}
