"""A script written for Sample Factory 2.1.1's public API (tests/sample_factory_scripts/) under sf, its imports changed
by the table of docs/customizing.md and nothing else: it trains its custom encoder, the encoder is a row of the
learner's and the inference worker's trees, the MLP kernel says once that it steps aside, its enjoy script plays the
checkpoint, and the profile report and live view read the run. Slow: the same in a parallel run (the fork server's
children build the encoder a script's `__main__` registered), and the original script under Sample Factory itself
when SAMPLE_FACTORY_PYTHON names a Python that has it."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import pytest
from conftest import LAYOUT, ROOT
from sample_factory_imports import SCRIPTS, import_table, rewrite, run_script, write_rewritten_scripts

from sf.analysis.cli import run_report
from sf.analysis.top import main as top_main

# the runs of conftest's session fixtures: built once, by the one pytest-xdist worker that runs every test reading them
pytestmark = pytest.mark.xdist_group("shared_runs")

ENCODER = "PoolingEncoder"


def test_every_row_of_the_table_names_what_sf_has():
    table = import_table()
    assert len(table) >= 20
    missing = [
        f"{module}.{name}" for (_, name), module in table.items() if not hasattr(importlib.import_module(module), name)
    ]
    assert missing == []


def test_the_rewrite_changes_the_sample_factory_imports_and_nothing_else():
    original = (SCRIPTS / "train_collect.py").read_text().splitlines()
    rewritten = rewrite((SCRIPTS / "train_collect.py").read_text(), import_table()).splitlines()
    changed = [(a, b) for a, b in zip(original, rewritten) if a != b]
    assert len(original) == len(rewritten) and changed
    assert all(a.startswith("from sample_factory.") and b.startswith("from sf.") for a, b in changed)
    with pytest.raises(KeyError, match="no row for Learner of sample_factory.algo.learning.learner"):
        rewrite("from sample_factory.algo.learning.learner import Learner\n", import_table())


def test_a_script_written_for_sample_factory_trains_its_encoder_under_sf(custom_model_run):
    _, exp, output = custom_model_run
    summary = json.loads((exp / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["env_frames"]["0"] >= 8192
    assert list((exp / "checkpoint_p0").glob("checkpoint_*.pth"))
    trees = {name: entry["tree"] for name, entry in json.loads((exp / "profile.json").read_text()).items()}
    learner = trees["Learner 0"]["train"]["children"]["calculate_losses"]["children"]["forward_head"]["children"]
    inference = trees["InferenceWorker_p0-w0"]["one_step"]["children"]["handle_policy_step"]["children"]["forward"]
    assert learner[ENCODER]["time"] > 0 and inference["children"][ENCODER]["time"] > 0
    notes = [line for line in output.splitlines() if "steps aside" in line]
    assert len(notes) == 1 and notes[0].endswith(f"for the custom model (encoder {ENCODER}): inference runs in torch")


def test_its_enjoy_script_plays_the_checkpoint(custom_model_run, monkeypatch, sf_log):
    scripts, exp, _ = custom_model_run
    monkeypatch.syspath_prepend(str(scripts))
    argv = ["--env=collect", f"--train_dir={exp.parent}", "--experiment=collect", "--max_num_episodes=2"]
    monkeypatch.setattr(sys, "argv", ["enjoy_collect", *argv])
    status, avg_reward = importlib.import_module("enjoy_collect").main()  # Sample Factory's (status, avg_reward)
    assert status == 0
    newest = max((exp / "checkpoint_p0").glob("checkpoint_*.pth")).stem.split("_")  # checkpoint_<version>_<frames>
    assert f"loaded policy version {int(newest[1])} ({int(newest[2])} env frames)" in sf_log
    returns = [float(line.split()[-1]) for line in sf_log if line.startswith("episode ")]
    assert len(returns) == 2 and avg_reward == pytest.approx(sum(returns) / 2, abs=1e-3)


def test_the_report_and_the_live_view_read_a_custom_model_run(custom_model_run, capsys):
    _, exp, _ = custom_model_run
    report = json.loads(run_report(exp, as_json=True))
    assert {c["name"] for c in report["components"]} >= {"Learner 0", "InferenceWorker_p0-w0"}
    assert report["verdict"]
    assert top_main([str(exp), "--once"]) == 0
    frame = capsys.readouterr().out  # a component's row needs two of its snapshots (one a second in this run)
    assert "finished (ok)" in frame and "Learner 0" in frame and "Inference p0-w0" in frame, frame


@pytest.mark.slow
def test_a_parallel_run_builds_the_encoder_a_script_registered_in_every_process(tmp_path):
    """The script run as a program: its `__main__` registers the encoder, and each component process, forked from
    the server, rebuilds it from the factory the run handed over."""
    scripts = write_rewritten_scripts(tmp_path)
    flags = ["--env=collect", "--num_workers=2", "--inference_placement=own_process", "--train_for_env_steps=8192"]
    result = run_script(scripts / "train_collect.py", [*flags, f"--train_dir={tmp_path}", "--experiment=p"], tmp_path)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    trees = json.loads((tmp_path / "p" / "profile.json").read_text())
    assert ENCODER in json.dumps(trees["Learner 0"]["tree"]) and ENCODER in json.dumps(
        trees["InferenceWorker_p0-w0"]["tree"]
    )
    assert (result.stdout + result.stderr).count("steps aside") == 1


@pytest.mark.skipif("SAMPLE_FACTORY_PYTHON" not in os.environ, reason="SAMPLE_FACTORY_PYTHON names no Sample Factory")
def test_every_type_name_of_sample_factory_has_its_row():
    """`sample_factory.utils.typing` is imported by name in Sample Factory's examples (`Env` by every batched env)."""
    listing = "import sample_factory.utils.typing as t; print(' '.join(n for n in vars(t) if n[0].isupper()))"
    python = os.environ["SAMPLE_FACTORY_PYTHON"]
    check = subprocess.run([python, "-c", listing], capture_output=True, text=True, timeout=120)
    names = set(check.stdout.split()) - {"Any", "Callable", "Dict", "Optional", "Tuple", "Union", "AttrDict"}
    rows = {name for module, name in import_table() if module == "sample_factory.utils.typing"}
    assert check.returncode == 0 and names and names <= rows, (check.stderr, names - rows)


@pytest.mark.slow
@pytest.mark.skipif("SAMPLE_FACTORY_PYTHON" not in os.environ, reason="SAMPLE_FACTORY_PYTHON names no Sample Factory")
def test_the_original_script_runs_under_sample_factory(tmp_path):
    python = os.environ["SAMPLE_FACTORY_PYTHON"]
    statements = "\n".join(f"from {module} import {name}" for module, name in import_table())
    check = subprocess.run([python, "-c", statements], capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stderr[-2000:]  # the left column is Sample Factory's public API
    result = subprocess.run(
        [python, "-m", "train_collect", "--env=collect", "--device=cpu", "--num_workers=2"]
        + ["--train_for_env_steps=8192", f"--train_dir={tmp_path}", "--experiment=sample_factory"],
        cwd=SCRIPTS,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(SCRIPTS)])),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert list((tmp_path / "sample_factory" / "checkpoint_p0").glob("*.pth"))


def test_a_multi_agent_script_with_an_observer_and_extra_stats_runs_under_sf(tmp_path):
    """tests/sample_factory_scripts/train_same_sign.py: every hook of its observer is called (those of the start and
    the stop once), its own scalar reaches TensorBoard, and the env's true objective and extra statistic its
    summary, every agent's episodes counted."""
    from conftest import read_scalars

    scripts = write_rewritten_scripts(tmp_path)
    args = [
        "--env=same_sign",
        "--serial_mode=True",
        "--train_for_seconds=6",
        "--seed=1",
    ]  # past the first summaries, 5 s in
    result = run_script(scripts / "train_same_sign.py", [*args, f"--train_dir={tmp_path}", "--experiment=s"], tmp_path)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    observed = json.loads((tmp_path / "s" / "observed.json").read_text())
    assert observed["on_init"] == observed["on_start"] == observed["on_stop"] == 1, observed
    assert observed["on_training_step"] >= 3 and observed["extra_summaries"] >= 1, observed
    assert read_scalars(tmp_path / "s")["observed/training_steps"]
    summary = json.loads((tmp_path / "s" / "summary.json").read_text())
    assert 0.0 <= summary["episode_extra_stats"]["0"]["both_right"] <= 1.0
    assert 0.0 <= summary["avg_true_objective"]["0"] <= 10.0
    frames = summary["env_frames"]["0"]
    assert summary["num_episodes"] >= frames // 10 - 16  # each agent's episodes of 10 steps, a few unfinished


def test_a_script_on_a_gymnasium_id_trains_in_every_process_without_registering_it(tmp_path):
    """tests/sample_factory_scripts/train_gym_id.py: `parse_sf_args`, `parse_full_cfg`, `run_rl` and
    `--env=CartPole-v1`, nothing registered; the rollout workers' own processes make the env too."""
    scripts = write_rewritten_scripts(tmp_path)
    flags = [*LAYOUT, "--env=CartPole-v1", "--train_for_env_steps=4096", f"--train_dir={tmp_path}", "--experiment=g"]
    result = run_script(scripts / "train_gym_id.py", flags, tmp_path)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    summary = json.loads((tmp_path / "g" / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["env_frames"]["0"] >= 4096 and summary["num_episodes"] > 0


def test_a_script_on_a_name_nothing_registered_says_what_to_add(tmp_path):
    scripts = write_rewritten_scripts(tmp_path)
    flags = ["--env=my_corridor", "--serial_mode=True", f"--train_dir={tmp_path}", "--experiment=c"]
    result = run_script(scripts / "train_gym_id.py", flags, tmp_path)
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(errors) == 1, result.stderr
    assert errors[0].startswith("sf: error: ") and "register_env('my_corridor', make_env)" in errors[0]
