"""`python -m sf.bench.learning`: the curve arithmetic on hand-made curves, the environment each side runs in, and the
whole tool on two tiny CartPole runs of sf (finished runs kept on a second invocation, outputs read back against the
runs' own event files)."""

from __future__ import annotations

import csv
import json
import os
import statistics
import subprocess
import sys

import pytest
from conftest import ROOT

from sf.analysis.tb_scalars import read_scalars
from sf.bench.learning_curves import Curve, Spread, checkpoints, spread_at
from sf.bench.learning_runs import Side


def test_value_at_takes_the_last_value_logged_up_to_the_frame_count():
    curve = Curve(((1000, 1.0), (2000, 2.0), (3050, 3.0)))
    assert curve.value_at(500) is None  # nothing logged yet
    assert curve.value_at(1900) == 1.0
    assert curve.value_at(3000) == 3.0  # logged 1.7 % past: a run stops at the end of a batch
    assert curve.value_at(4000) is None  # the run stopped well before


def test_spread_over_seeds_leaves_out_seeds_without_a_value():
    curves = [Curve(((100, 1.0),)), Curve(((100, 3.0),)), Curve(((900, 7.0),))]
    spread = spread_at(curves, 100)
    assert spread.values == (1.0, 3.0)
    assert (spread.mean, spread.std, spread.low, spread.high) == (2.0, statistics.stdev([1.0, 3.0]), 1.0, 3.0)
    assert spread.cell() == "2.00 ± 1.41"
    assert Spread((5.0,)).cell() == "5.00" and Spread(()).cell() == "-"
    assert checkpoints(300_000) == [100_000, 200_000, 300_000]


def test_sample_factory_side_never_sees_an_sf_tree_on_its_path(monkeypatch, tmp_path):
    """`python -m sf_examples...` must find Sample Factory's examples, not the sf checkout's of the same name."""
    keep = str(tmp_path / "extra")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), keep]))
    other_sf = str(tmp_path / "other")
    assert Side("Sample Factory", "python", hidden=(str(ROOT), other_sf), is_sf=False).environ()["PYTHONPATH"] == keep
    sf_side = Side("sf before", "python", pythonpath=(other_sf,), hidden=(str(ROOT), other_sf))
    assert sf_side.environ()["PYTHONPATH"] == os.pathsep.join([other_sf, keep])
    assert sf_side.slug == "sf_before"


def run_tool(out, *flags):
    cmd = [sys.executable, "-m", "sf.bench.learning", "--suite=cartpole", "--seeds=2", "--frames=2048", f"--out={out}"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([*cmd, *flags], capture_output=True, text=True, timeout=240, env=env, cwd=out.parent)


@pytest.mark.slow  # two training runs; the value and spread rules are tested above without one
def test_two_seeds_of_sf_give_curves_a_table_and_a_plot(tmp_path):
    out = tmp_path / "learning"
    first = run_tool(out)
    assert first.returncode == 0, first.stdout + first.stderr
    assert first.stdout.count(": done in") == 2
    runs = out / "runs" / "CartPole-v1" / "sf"
    finals = []
    for seed in (1, 2):
        record = json.loads((runs / f"seed{seed}.done.json").read_text())
        assert record["returncode"] == 0 and f"--seed={seed}" in record["command"]
        assert record["pythonpath"].split(os.pathsep)[0] == str(ROOT)
        points = read_scalars(runs / f"seed{seed}")["reward/avg_episode_reward"]
        finals.append([v for step, v in points if step <= 2048 * 1.03][-1])

    rows = list(csv.DictReader(open(out / "learning_curves.csv")))
    last = [r for r in rows if r["frames"] == "2048"]
    assert len(last) == 1 and last[0]["seeds"] == "2"
    assert float(last[0]["mean"]) == pytest.approx(statistics.fmean(finals), abs=1e-3)
    assert float(last[0]["std"]) == pytest.approx(statistics.stdev(finals), abs=1e-3)
    table = (out / "results.md").read_text()
    assert f"| CartPole-v1 | 2,048 | {statistics.fmean(finals):.2f} ± {statistics.stdev(finals):.2f} |" in table
    assert f"| CartPole-v1 | sf | {finals[0]:.2f}, {finals[1]:.2f} |" in table
    assert (out / "learning_curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    again = run_tool(out)  # finished runs are kept: nothing trains, the same table comes out
    assert again.returncode == 0 and again.stdout.count("finished before") == 2
    assert (out / "results.md").read_text() == table


def test_bad_input_is_one_line_naming_the_flag(tmp_path):
    missing = run_tool(tmp_path / "x", f"--sample_factory={tmp_path / 'no_python'}")
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == [
        f"sf.bench.learning: error: --sample_factory: {tmp_path / 'no_python'} is not a file (give a venv's bin/python)"
    ]
    not_a_tree = run_tool(tmp_path / "x", f"--sf_tree=old={tmp_path}")
    assert not_a_tree.returncode == 2
    assert not_a_tree.stderr.strip().splitlines() == [
        f"sf.bench.learning: error: --sf_tree: 'old={tmp_path}' is not LABEL=PATH of a tree holding sf/__init__.py"
    ]
    nothing = run_tool(tmp_path / "x", "--report_only")
    assert nothing.returncode == 1
    assert nothing.stderr.strip().splitlines() == [
        f"sf.bench.learning: no finished runs of CartPole-v1 in {tmp_path / 'x'}"
    ]
