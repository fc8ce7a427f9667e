"""A population trained as a user runs one, serially: replacements and mutations in the log, the per-policy files,
TensorBoard and summary.json agree with one another, and a resumed run starts from the files."""

from __future__ import annotations

import json
import math
import re
import shutil
from types import SimpleNamespace

import pytest
from conftest import read_scalars, run_sf

from sf.pbt.mutation import tuned

FLAGS = [
    "--env=CartPole-v1",
    "--serial_mode=True",
    "--num_policies=4",
    "--with_pbt=True",
    "--pbt_start_mutation=1024",
    "--pbt_period_env_steps=1024",
    "--pbt_replace_reward_gap=0",
    "--pbt_replace_reward_gap_absolute=0",
    "--pbt_mutation_rate=0.5",
    "--use_rnn=False",
    "--encoder_mlp_layers",
    "16",
    "--num_workers=2",
    "--num_envs_per_worker=4",
    "--rollout=32",
    "--batch_size=256",
    "--seed=3",
]
REPLACED = re.compile(r"PBT: policy (\d) \(true_objective [\d.-]+\) takes policy (\d)'s weights.* at ([\d,]+) frames")
MUTATED = re.compile(r"PBT: policy (\d) mutates (.+)$", re.M)


@pytest.fixture(scope="module")
def population(tmp_path_factory):
    train_dir = tmp_path_factory.mktemp("pbt")
    # snapshots every second for about 2 s: `sf.profile top` needs two of each component for its rates
    result = run_sf(
        [*FLAGS, "--train_for_env_steps=10240", "--experiment_summaries_interval=1"]
        + [f"--train_dir={train_dir}", "--experiment=pop"]
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    return train_dir / "pop", result.stdout + result.stderr


def test_every_replacement_and_mutation_is_a_log_line_a_scalar_and_in_the_summary(population):
    exp, log = population
    summary = json.loads((exp / "summary.json").read_text())
    policies = summary["population"]["policies"]
    logged = {
        (int(target), int(source), int(frames.replace(",", ""))) for target, source, frames in REPLACED.findall(log)
    }
    done = {(int(p), r["source"], r["frames"]) for p, entry in policies.items() for r in entry["replacements"]}
    assert done and done <= logged and len(logged - done) <= 4  # a copy asked for as the run stopped stays undone
    mutations = {p: sum(line.count(" -> ") for q, line in MUTATED.findall(log) if q == p) for p in "0123"}
    assert mutations["0"] == 0  # the reference policy is never mutated
    assert {p: policies[p]["mutations"] for p in "0123"} == mutations
    for p in range(4):
        scalars = read_scalars(exp, p)
        assert scalars["pbt/replacements"][-1] == len(policies[str(p)]["replacements"])
        assert scalars["pbt/mutations"][-1] == policies[str(p)]["mutations"]
        for name, value in policies[str(p)]["hyperparameters"].items():
            assert scalars[f"pbt/{name}"][-1] == pytest.approx(value, rel=1e-6)
    objectives = {p: policies[p]["objective"] for p in policies}
    assert objectives == {p: pytest.approx(v) for p, v in summary["avg_true_objective"].items()}
    assert sorted(policies, key=lambda p: policies[p]["rank"]) == sorted(objectives, key=lambda p: -objectives[p])


def test_the_files_hold_each_policys_values_and_a_resume_starts_from_them(population, tmp_path):
    exp, _ = population
    summary = json.loads((exp / "summary.json").read_text())
    for p, entry in summary["population"]["policies"].items():
        held = json.loads((exp / f"policy_{int(p):02d}_cfg.json").read_text())
        assert held == entry["hyperparameters"] and set(held) == set(tuned(SimpleNamespace(pbt_optimize_gamma=False)))
        assert json.loads((exp / f"policy_{int(p):02d}_reward_shaping.json").read_text()) is None
    # a resume (of a copy) whose steps start later than it trains: the values it ends with are the ones it read
    shutil.copytree(exp, tmp_path / "pop")
    result = run_sf(
        [*FLAGS, "--train_for_env_steps=12288", "--pbt_start_mutation=100000", f"--train_dir={tmp_path}",
         "--experiment=pop"]
    )  # fmt: skip
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert "Learner 3 resumed from policy version" in result.stdout + result.stderr
    resumed = json.loads((tmp_path / "pop" / "summary.json").read_text())["population"]["policies"]
    assert {p: v["hyperparameters"] for p, v in resumed.items()} == {
        p: v["hyperparameters"] for p, v in summary["population"]["policies"].items()
    }


def test_the_report_top_and_breakdown_show_each_policys_learner_and_objective(population):
    from sf.analysis.top import ReplaySource, frame_text
    from sf.breakdown.attribution import RowTimes
    from sf.breakdown.calibration import EventCosts
    from sf.breakdown.report import Breakdown, table

    exp, _ = population
    summary = json.loads((exp / "summary.json").read_text())
    assert summary["fps"] == pytest.approx(sum(summary["env_frames"].values()) / summary["wall_time_s"], rel=1e-6)
    objectives = {p: entry["objective"] for p, entry in summary["population"]["policies"].items()}
    best_first = sorted(objectives, key=lambda p: (-objectives[p], int(p)))

    report = run_sf(["report", str(exp)], module="sf.profile", timeout=120).stdout
    lines = report[report.index("policies, best first by true_objective:") :].splitlines()[1:5]
    for line, p in zip(lines, best_first):
        assert line.startswith(f"  policy {p}: Learner {p} (work ") and f"true_objective {objectives[p]:.4g}" in line
    as_json = json.loads(run_sf(["report", str(exp), "--json"], module="sf.profile", timeout=120).stdout)
    assert [line["policy"] for line in as_json["policies"]] == [int(p) for p in best_first]

    screen = frame_text(ReplaySource(exp, speed=1.0, at=math.inf).frame(4.0), height=60)
    shown = dict(re.findall(r"\bp(\d) ([\d.]+) \(lag [\d.]+\)", screen[screen.index("true_objective:") :]))
    assert sorted(shown) == ["0", "1", "2", "3"], screen  # the last progress record's, one per policy
    assert all(f"Learner {p}" in screen for p in range(4)), screen

    from sf.analysis.population import policy_lines

    costs = EventCosts(0.0, 0.0, 0.0, 0.0)
    learners = {f"Learner {p}": RowTimes(python=1.0 + p) for p in range(4)}
    breakdown = Breakdown(["m"], "serial", "cpu", costs, {}, learners, 1.0, 0.0, 0.0, [], 1, None, 0.0, None)
    breakdown.policies = policy_lines(summary)
    text = table(breakdown)
    assert f"  policy {best_first[0]}: Learner {best_first[0]} ({1.0 + int(best_first[0]):.3f} s of the loop)" in text
