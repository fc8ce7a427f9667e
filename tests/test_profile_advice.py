"""The layout moves `advice.advise` prices, each against the bottleneck model worked by hand on a hand-made run."""

from pathlib import Path

import pytest

from sf.analysis.advice import advise
from sf.analysis.run_data import Experiment
from tests.test_profile_report import node
from tests.test_profile_trust import activity

CONFIG = {
    "num_workers": 2,
    "num_envs_per_worker": 4,
    "worker_num_splits": 2,
    "policy_workers_per_policy": 1,
    "inference_placement": "own_process",
    "batch_size": 1024,
    "num_epochs": 4,
    "serial_mode": False,
}


def experiment(inference_tree: dict, learner_tree: dict, config: dict = CONFIG) -> Experiment:
    """Two rollout workers (simulation 0.3, per-step messages 0.2 of their 2 s), one inference process, the learner;
    0.1 cores each, so the cores are far from the limit."""
    rollout = {"env_step": node(0.6), "enqueue_policy_requests": node(0.4), "wait_actions": node(1.0)}
    components = [
        activity("RolloutWorker_w0", "RolloutWorker", 1, 2.0, rollout, 0.2, 2.0),
        activity("RolloutWorker_w1", "RolloutWorker", 2, 2.0, rollout, 0.2, 2.0),
        activity("InferenceWorker_p0-w0", "InferenceWorker", 3, 2.0, inference_tree, 0.2, 2.0),
        activity("Learner 0", "Learner", 4, 2.0, learner_tree, 0.2, 2.0),
    ]
    return Experiment(Path("."), components, {}, config, frames=1000, fps=500.0)


def test_an_inference_process_that_limits_the_rate_gets_three_priced_moves():
    """Inference process busy 0.95 (inference 0.5, sends 0.45), rollout workers 0.5, learner 0.2:
    - a second inference process: 0.95 / 2 < 0.5, the rollout workers limit next: 0.95 / 0.5 - 1 = +90 %;
    - twice the envs per message halve every group's communication: inference 0.725, rollout 0.4: +31 %;
    - inference inside the rollout workers: each gets half of 0.5, 0.75, its sends gone: 0.95 / 0.75 - 1 = +27 %."""
    exp = experiment({"one_step": node(1.9, send_messages=node(0.9)), "wait_requests": node(0.1)}, {"train": node(0.4)})
    moves = advise(exp).moves
    assert [(m.flag, m.now, m.to) for m in moves] == [
        ("--policy_workers_per_policy", "1", "2"),
        ("--num_envs_per_worker", "4", "8"),
        ("--inference_placement", "own_process", "rollout_worker"),
    ]
    assert [m.fps_gain for m in moves] == pytest.approx([0.95 / 0.5 - 1, 0.95 / 0.725 - 1, 0.95 / 0.75 - 1])
    assert moves[0].limit == "RolloutWorker" and "(as with --worker_num_splits=1)" in moves[1].why


def test_inference_of_a_model_with_an_image_encoder_is_not_advised_into_the_rollout_workers():
    """The same loads with a conv encoder: each worker's forward on its own few envs costs more per sample than one
    batched forward, which the model cannot price (measured slower on the Doom suite), so that move is left out."""
    config = {**CONFIG, "precision_in_use": {"used": "fp32", "image_encoder": True}}
    exp = experiment({"one_step": node(1.9, send_messages=node(0.9)), "wait_requests": node(0.1)}, {"train": node(0.4)},
                     config)  # fmt: skip
    assert [m.flag for m in advise(exp).moves] == ["--policy_workers_per_policy", "--num_envs_per_worker"]


def test_a_learner_that_limits_the_rate_gets_fewer_epochs_and_larger_batches_priced():
    """Learner busy 0.9 of its 2 s: train 1.6 s (clip 0.2 inside), after_optimizer 0.2 s. Half the epochs halve train:
    1.8 s of work becomes 1.0, 0.5, and the rollout workers (0.5) share the limit: +80 %. Twice the batch runs clip and
    after_optimizer half as often: 1.6 s, 0.8: +12.5 %."""
    learner = {"train": node(1.6, update=node(1.0, clip=node(0.2))), "after_optimizer": node(0.2)}
    exp = experiment({"one_step": node(0.4), "wait_requests": node(1.6)}, learner)
    advice = advise(exp)
    assert advice.verdict.kind == "learner" and advice.headline() == "learner-bound 90 %"
    moves = {m.flag: m for m in advice.moves}
    assert (moves["--num_epochs"].to, moves["--num_epochs"].fps_gain) == ("2", pytest.approx(0.8))
    assert "change the algorithm" in moves["--num_epochs"].why
    assert (moves["--batch_size"].to, moves["--batch_size"].fps_gain) == ("2048", pytest.approx(0.125))
    # the progress line offers the move with what it changes, not as a free speed-up
    assert moves["--num_epochs"].progress_text() == (
        "--num_epochs=2 +80% FPS (changes the algorithm: fewer passes over each batch)"
    )
    assert moves["--batch_size"].progress_text().endswith("(changes the algorithm: larger batches)")


def test_a_serial_run_on_idle_cores_is_advised_to_run_parallel():
    """One process (0.1 cores wanted of 2): rollout and inference work 1.0 + 0.4 of 2 s, the learner 0.4. Split, the
    two rollout processes carry 0.35 each and the learner 0.2: 0.9 / 0.35 - 1."""
    rollout = {"env_step": node(0.6), "enqueue_policy_requests": node(0.4)}
    components = [
        activity("RolloutWorker_w0", "RolloutWorker", 1, 2.0, rollout, 0.2, 2.0),
        activity("InferenceWorker_p0-w0", "InferenceWorker", 1, 2.0, {"one_step": node(0.4)}, 0.2, 2.0),
        activity("Learner 0", "Learner", 1, 2.0, {"train": node(0.4)}, 0.2, 2.0),
    ]
    exp = Experiment(Path("."), components, {}, CONFIG | {"serial_mode": True}, frames=1000, fps=500.0)
    advice = advise(exp)
    assert advice.verdict.limiting == "the serial process" and advice.bound == pytest.approx(0.9)
    (move,) = [m for m in advice.moves if m.flag == "--serial_mode"]
    assert move.to == "False" and move.fps_gain == pytest.approx(0.9 / 0.35 - 1)


def test_a_serial_run_on_a_machine_other_programs_keep_busy_is_not_advised_to_run_parallel():
    """The run above, with the machine's cores busy 1.9 of 2 over the window (`/proc/stat`), 0.1 of them this run's
    process: other programs took 1.8, and splitting the run over processes would find no core for them."""
    rollout = {"env_step": node(0.6), "enqueue_policy_requests": node(0.4)}
    components = [
        activity("RolloutWorker_w0", "RolloutWorker", 1, 2.0, rollout, 0.2, 2.0),
        activity("InferenceWorker_p0-w0", "InferenceWorker", 1, 2.0, {"one_step": node(0.4)}, 0.2, 2.0),
        activity("Learner 0", "Learner", 1, 2.0, {"train": node(0.4)}, 0.2, 2.0),
    ]
    config = CONFIG | {"serial_mode": True}
    busy = Experiment(Path("."), components, {}, config, frames=1000, fps=500.0, machine_cores=1.9)
    assert not [m for m in advise(busy).moves if m.flag == "--serial_mode"]
    quiet = Experiment(Path("."), components, {}, config, frames=1000, fps=500.0, machine_cores=0.1)
    (move,) = [m for m in advise(quiet).moves if m.flag == "--serial_mode"]
    assert "1.9 of 2 cores idle" in move.why and "other programs" not in move.why and "upper bound" in move.why
    half = Experiment(Path("."), components, {}, config, frames=1000, fps=500.0, machine_cores=0.6)
    (move,) = [m for m in advise(half).moves if m.flag == "--serial_mode"]
    assert "1.4 of 2 cores idle (other programs kept 0.5 busy)" in move.why


def test_the_headline_of_a_serial_run_says_how_the_process_and_the_kind_are_both_busy():
    """One process busy 0.9 of its time: simulation 0.5, messages 0.2, the learner 0.2. `simulation-bound 90 %` would
    read as a simulator 90 % busy; the headline gives both shares."""
    rollout = {"env_step": node(1.0), "enqueue_policy_requests": node(0.4)}
    components = [
        activity("RolloutWorker_w0", "RolloutWorker", 1, 2.0, rollout, 1.8, 2.0),
        activity("Learner 0", "Learner", 1, 2.0, {"train": node(0.4)}, 1.8, 2.0),
    ]
    advice = advise(Experiment(Path("."), components, {}, CONFIG | {"serial_mode": True}, frames=1000, fps=500.0))
    assert advice.headline() == "simulation-bound: one process busy 90 %, simulation 50 %"


def test_a_machine_busy_with_other_work_offers_no_cores_for_more_workers():
    """The simulation-bound case, but the rollout processes waited for a core 70 % of the time: the CPU they wanted
    fills the two cores, so more workers would buy nothing and are not advised."""
    rollout = {"env_step": node(1.8), "wait_actions": node(0.2)}
    components = [activity(f"RolloutWorker_w{i}", "RolloutWorker", i, 2.0, rollout, 0.6, 2.0) for i in range(2)] + [
        activity("Learner 0", "Learner", 9, 2.0, {"train": node(0.2)}, 0.2, 2.0)
    ]
    for c in components[:2]:
        c.run_delay_s = 1.4
    exp = Experiment(Path("."), components, {}, CONFIG, frames=1000, fps=500.0)
    assert not [m for m in advise(exp).moves if m.flag == "--num_workers"]
    for c in components[:2]:
        c.run_delay_s = 0.0
    assert [m.flag for m in advise(exp).moves][:1] == ["--num_workers"]


def test_advice_on_a_two_core_machine_never_counts_more_cores():
    """Processes wanting 3.2 cores (0.3 used, 0.5 waiting for a core each) while other programs keep 0.8 of the 2
    busy: the moves are priced on at most the machine's 2 cores."""
    from dataclasses import replace

    exp = experiment({"one_step": node(1.9, send_messages=node(0.9)), "wait_requests": node(0.1)}, {"train": node(0.4)})
    components = [replace(c, cpu_s=0.6, run_delay_s=1.0, wall_s=2.0) for c in exp.components]
    exp = replace(exp, components=components, machine_cores=2.0)
    advice = advise(exp)
    texts = [m.line() for m in advice.moves] + [advice.verdict.limiting]
    assert advice.moves and not [t for t in texts if "3.2" in t], texts
