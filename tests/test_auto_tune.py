"""The layout auto-tuner: which layouts each verdict proposes (no runs), the choice of the best, the reproducing
command line, and a real tuning that must end within a tiny budget."""

from __future__ import annotations

import json
import random
import time
from dataclasses import replace

import pytest

import sf.bench.cli  # noqa: F401  (imported here, so the budget test times the tuning, not the imports)
from sf.bench.cli import main
from sf.bench.layouts import UNFIXABLE, Layout, Limits, candidates, replace_flags
from sf.bench.tune import NOISE, Trial, pick_best
from sf.cfg.arguments import default_cfg
from sf.envs.families import family_of

BASE = Layout(
    num_workers=2,
    num_envs_per_worker=8,
    worker_num_splits=2,
    policy_workers_per_policy=1,
    inference_placement="own_process",
    batched_sampling=False,
)
FOUR_CORES = Limits(cpus=4, batched_sampling=True)


def changed(a: Layout, b: Layout) -> dict:
    return {k: (getattr(a, k), getattr(b, k)) for k in a.__dataclass_fields__ if getattr(a, k) != getattr(b, k)}


def test_simulation_bound_adds_workers_up_to_the_cores_first():
    proposed = [layout for layout, _ in candidates(BASE, "simulation", FOUR_CORES)]
    assert proposed[0] == replace(BASE, num_workers=4)
    assert replace(BASE, num_workers=3) in proposed
    assert replace(BASE, batched_sampling=True) in proposed
    assert all(layout.num_workers <= 4 for layout in proposed)


def test_simulation_bound_oversubscribed_moves_envs_onto_one_worker_per_core():
    layout = replace(BASE, num_workers=4, num_envs_per_worker=8)
    proposed = [c for c, _ in candidates(layout, "simulation", Limits(cpus=2))]
    assert proposed[0] == replace(layout, num_workers=2, num_envs_per_worker=16)  # same 32 envs on 2 processes


def test_simulation_bound_without_splits_gets_double_buffering():
    layout = replace(BASE, num_workers=4, worker_num_splits=1)
    proposed = [c for c, _ in candidates(layout, "simulation", FOUR_CORES)]
    assert replace(layout, worker_num_splits=2) in proposed


def test_inference_bound_grows_batches_and_inference_workers():
    proposed = [c for c, _ in candidates(BASE, "inference", FOUR_CORES)]
    assert [changed(BASE, c) for c in proposed] == [
        {"num_envs_per_worker": (8, 16)},
        {"worker_num_splits": (2, 1)},
        {"policy_workers_per_policy": (1, 2)},
    ]


def test_inference_bound_in_the_rollout_workers_tries_a_shared_inference_process():
    layout = replace(BASE, inference_placement="rollout_worker")
    proposed = [changed(layout, c) for c, _ in candidates(layout, "inference", FOUR_CORES)]
    assert proposed.index({"inference_placement": ("rollout_worker", "own_process")}) == 2  # after larger requests
    assert {"policy_workers_per_policy": (1, 2), "inference_placement": ("rollout_worker", "own_process")} in proposed


def test_communication_bound_sends_no_messages_then_more_frames_per_message():
    proposed = [c for c, _ in candidates(BASE, "communication", FOUR_CORES)]
    assert [changed(BASE, c) for c in proposed] == [
        {"inference_placement": ("own_process", "rollout_worker")},
        {"num_envs_per_worker": (8, 16)},
        {"worker_num_splits": (2, 1)},
        {"batched_sampling": (False, True)},
    ]


@pytest.mark.parametrize("verdict", sorted(UNFIXABLE))
def test_learner_or_batcher_bound_proposes_nothing_and_says_why(verdict):
    assert candidates(BASE, verdict, FOUR_CORES) == []  # 2 workers + 1 inference + 1 learner fit 4 cores
    assert f"{verdict}-bound" in UNFIXABLE[verdict] and "layout" in UNFIXABLE[verdict]


@pytest.mark.parametrize("verdict", sorted(UNFIXABLE))
def test_learner_bound_on_oversubscribed_cores_frees_one_by_halving_the_workers(verdict):
    layout = replace(BASE, num_workers=4, num_envs_per_worker=8)
    proposed = [c for c, _ in candidates(layout, verdict, Limits(cpus=2))]
    assert proposed == [replace(layout, num_workers=2, num_envs_per_worker=16)]
    assert candidates(layout, verdict, Limits(cpus=2, serial=True)) == []


def test_batched_stepping_is_proposed_only_where_allowed():
    assert Limits(cpus=4).batched_sampling is False  # it changes what the env factory must return
    for verdict in (None, "simulation", "inference", "communication"):
        assert not any(c.batched_sampling for c, _ in candidates(BASE, verdict, Limits(cpus=4, batched_sampling=False)))


def test_no_verdict_explores_every_axis():
    axes = {key for c, _ in candidates(BASE, None, FOUR_CORES) for key in changed(BASE, c)}
    assert axes == {
        "num_envs_per_worker",
        "num_workers",
        "worker_num_splits",
        "policy_workers_per_policy",
        "inference_placement",
    }


@pytest.mark.parametrize("verdict", [None, "simulation", "inference", "communication"])
def test_every_candidate_is_new_valid_and_within_limits(verdict):
    limits = Limits(cpus=2, max_envs_per_worker=16, max_total_envs=32)
    rng = random.Random(0)
    for _ in range(200):
        splits = rng.choice([1, 2, 4])
        layout = Layout(
            rng.randint(1, 6),
            splits * rng.randint(1, 4),
            splits,
            rng.randint(1, 2),
            rng.choice(["auto", "own_process", "rollout_worker"]),
            rng.random() < 0.5,
        )
        proposed = [c for c, _ in candidates(layout, verdict, limits)]
        assert layout not in proposed and len(set(proposed)) == len(proposed)
        for c in proposed:
            assert c.num_envs_per_worker % c.worker_num_splits == 0
            assert c.num_envs_per_worker <= 16 and c.num_workers * c.num_envs_per_worker <= 32
            assert c.policy_workers_per_policy <= 2


def test_serial_mode_changes_no_process_counts():
    for verdict in (None, "simulation", "inference"):
        for c, _ in candidates(BASE, verdict, Limits(cpus=4, serial=True)):
            assert c.num_workers == BASE.num_workers and c.policy_workers_per_policy == 1
            assert c.inference_placement == BASE.inference_placement


def trial(fps: float, workers: int = 2) -> Trial:
    return Trial(replace(BASE, num_workers=workers), "", fps, None, "ok", 1.0, "")


def test_pick_best_is_never_slower_than_the_defaults():
    rng = random.Random(1)
    for _ in range(500):
        defaults = trial(rng.uniform(0, 1000))
        trials = [defaults, *(trial(rng.uniform(0, 1500), w) for w in range(3, 3 + rng.randint(0, 5)))]
        best = pick_best(defaults, trials)
        assert best.fps >= defaults.fps
        if best is not defaults:
            assert best.fps > defaults.fps * (1 + NOISE)
    assert pick_best(trial(1000), [trial(1000), trial(1000 * (1 + NOISE / 2), 3)]).layout == BASE
    assert pick_best(trial(0), [trial(0)]) is None


def test_replace_flags_reproduces_the_layout_whatever_the_spelling():
    argv = [
        "--env=CartPole-v1",
        "--num_workers",
        "4",
        "--num_envs_per_worker=2",
        "--batched_sampling",
        "--encoder_mlp_layers",
        "64",
        "64",
        "--worker_num_splits",
        "1",
    ]
    out = replace_flags(argv, BASE)
    assert out == ["--env=CartPole-v1", "--encoder_mlp_layers", "64", "64", *BASE.flags()]
    assert replace_flags([*argv, "--experiment", "x"], BASE, drop=("experiment",)) == out
    cfg = default_cfg(**{f[2:].split("=")[0]: f.split("=")[1] for f in BASE.flags()})
    assert Layout.from_cfg(cfg) == BASE


@pytest.mark.slow
def test_auto_tune_ends_within_a_tiny_budget(tmp_path, capsys):
    """A real tuning of a tiny serial CartPole layout, with a budget shorter than a default trial."""
    budget = 15.0
    flags = [
        "--env=CartPole-v1",
        "--serial_mode=True",
        "--async_rl=False",
        "--num_workers=1",
        "--num_envs_per_worker=4",
        "--rollout=16",
        "--batch_size=64",
        "--num_batches_per_epoch=1",
    ]
    start = time.monotonic()
    code = main(
        [
            *flags,
            "--auto_tune=True",
            f"--tune_budget_s={budget}",
            "--tune_trial_s=60",
            f"--train_dir={tmp_path}",
            "--experiment=t",
        ]
    )
    assert time.monotonic() - start <= budget + 1.0
    out = capsys.readouterr().out
    data = json.loads((tmp_path / "t" / "tune.json").read_text())
    assert data["budget_s"] == budget and data["elapsed_s"] <= budget + 0.5
    defaults = data["trials"][0]
    assert Layout(**defaults["layout"]) == Layout.from_cfg(family_of("CartPole-v1").parse_cfg(flags))
    if data["best"] is None:
        assert code == 1 and "no layout measured" in out
        return
    assert code == 0 and data["best"]["fps"] >= defaults["fps"] > 0
    assert data["command"].startswith("python -m sf_examples.train_gym_env --env=CartPole-v1")
    assert data["command"].endswith(" ".join(data["best"]["flags"]))
    assert f"train with it: {data['command']}" in out
