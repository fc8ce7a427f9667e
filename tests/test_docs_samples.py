"""Every sample of program output in the docs against the output of a real run, as a reader would compare them:
numbers aside, a line the docs show is a line the program prints, and a profile tree shows every key and the header
line a real run prints for that component.

A sample is a fenced block without a language, marked on the line before it with `<!-- output: <run> -->`; every
block that looks like output of sf (a tree, a progress line, a report...) must carry a mark. The runs are short:
one serial CartPole run, its evaluation and its report, and one serial run of a custom model (the session's
`custom_model_run`) are shared by the default-suite tests; a parallel run, the breakdown and the env benchmark are
slow tests. `(format)` after the run compares only the lines every run of that
tool prints (headings, column headers, the verdict line's form), for samples of long runs on other envs.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import gymnasium
import numpy as np
import pytest
from conftest import ROOT

# the runs of conftest's session fixtures: built once, by the one pytest-xdist worker that runs every test reading them
pytestmark = pytest.mark.xdist_group("shared_runs")

DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
MARK = re.compile(r"<!-- output: ([a-z_ ()]+) -->\s*$")
LOOKS_LIKE_OUTPUT = re.compile(
    r"profile tree view:|Fps is \(|^Collected \{|started .+ pid=|loaded policy version|: cpu [\d.]+ s of|"
    r"^verdict: |keys changed beyond run-to-run noise|cross-stack breakdown \(|^phase +FPS|sf: error:|^Run finished: ",
    re.M,
)
LOG_PREFIX = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\]\[\d+\] ")
NUMBER = re.compile(r"[-+]?(?:\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?|nan|inf)\b")
TREE_LINE = re.compile(r"^( *)([\w./()*-]+: -?[\d.]+(?:, [\w./()*-]+: -?[\d.]+)*)$")
ELIDED = "..."


@dataclass(frozen=True)
class Sample:
    page: str
    line: int
    run: str
    text: str
    code_before: str = ""  # the python block before the sample, for `<!-- output: python above -->`

    @property
    def lines(self) -> list[str]:
        return [LOG_PREFIX.sub("", line) for line in self.text.splitlines()]


def _blocks(path: Path):
    text = path.read_text()
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = MARK.search(before)
        yield match.group(1), match.group(2), mark.group(1) if mark else None, text[: match.start()].count("\n") + 1


def samples() -> list[Sample]:
    found = []
    for path in DOC_FILES:
        code = ""
        for lang, body, run, line in _blocks(path):
            if lang == "python":
                code = body
            elif run is not None:
                found.append(Sample(str(path.relative_to(ROOT)), line, run, body, code))
    return found


def template(line: str) -> str:
    """A line with its log prefix, numbers and runs of spaces taken out."""
    return " ".join(NUMBER.sub("#", LOG_PREFIX.sub("", line)).split())


def trees(lines: list[str]) -> dict[str, tuple[set[str], bool]]:
    """Component -> (every key path its printed tree shows, whether the tree elides some with `...`)."""
    found: dict[str, tuple[set[str], bool]] = {}
    name, stack = None, []
    for line in lines:
        head = re.match(r"^(.+) profile tree view:$", line)
        if head:
            name, stack = head.group(1), []
            found[name] = (set(), False)
            continue
        if name is None:
            continue
        if line.strip() == ELIDED:
            found[name] = (found[name][0], True)
            continue
        match = TREE_LINE.match(line)
        if not match:
            name = None
            continue
        depth = len(match.group(1)) // 2
        keys = [item.split(":")[0] for item in match.group(2).split(", ")]
        del stack[depth:]
        found[name][0].update("/".join([*stack, key]) for key in keys)
        if len(keys) == 1:
            stack.append(keys[0])  # a parent if the next line is deeper; the next line's depth trims it otherwise
    return found


def header_before(lines: list[str], name: str) -> str | None:
    index = lines.index(f"{name} profile tree view:")
    return lines[index - 1] if index > 0 and lines[index - 1].startswith(f"{name}: cpu ") else None


# the parts a progress line adds after Sample Factory's `... Policy lag: [..]`, as `Progress.done` and the live verdict
# write them: whether a run prints each depends on its length (a time left, a verdict of two snapshots), which a test
# run shorter than the documented one cannot reproduce
PROGRESS_PARTS = re.compile(
    r"^(Done: # % of # frames(, about # (s|min|h) left( \(--train_for_seconds\))?)?"
    r"|Bound \(last # s\): [a-z]+-bound(, cores # %| # %|: [a-z' ]+ busy # %, [a-z]+ # %)"
    r"|Try --[a-z_]+=\S+ #% FPS( \(changes the algorithm: [a-z ]+\))?|Warning: .+)$"
)


def _progress_template(line: str) -> tuple[str, list[str]] | None:
    """A progress line as Sample Factory's part (templated) and the parts sf adds; None for another line."""
    t = template(line)
    if not t.startswith("Fps is ("):
        return None
    head, sep, rest = t.partition("Policy lag: [#]")
    return head + sep, [part for part in rest.split(". ") if part]


def check_log(sample: Sample, output: str) -> list[str]:
    """Trees complete with their headers, every other line one the program prints, the same processes started.
    A progress line: Sample Factory's part as a real line has it, each part sf adds one it can print."""
    problems = []
    real_lines = [LOG_PREFIX.sub("", line) for line in output.splitlines()]
    real_templates = {template(line) for line in real_lines}
    shown, real = trees(sample.lines), trees(real_lines)
    for name, (keys, elided) in shown.items():
        if name not in real:
            problems.append(f"{name}: no such tree in a real run")
            continue
        missing = real[name][0] - keys
        if missing and not elided:
            problems.append(f"{name}: the tree lacks {sorted(missing)}")
        real_header = header_before(real_lines, name)
        shown_header = header_before(sample.lines, name)
        if real_header and (shown_header is None or template(shown_header) != template(real_header)):
            problems.append(f"{name}: a real run prints `{real_header}` above the tree")
    in_tree = {line for line in sample.lines if TREE_LINE.match(line) or line.endswith("profile tree view:")}
    for line in sample.lines:
        if line in in_tree or ELIDED in line or not line.strip():
            continue
        progress = _progress_template(line)
        if progress is not None and template(line) not in real_templates:
            heads = {h[0] for h in map(_progress_template, real_lines) if h is not None}
            if progress[0] not in heads or not all(PROGRESS_PARTS.match(part) for part in progress[1]):
                problems.append(f"no real progress line reads like `{line}`")
        elif template(line) not in real_templates:
            problems.append(f"no real line reads like `{line}`")
    started = {template(line) for line in sample.lines if re.search(r"started .+ pid=", line)}
    if started and started != {template(line) for line in real_lines if re.search(r"started .+ pid=", line)}:
        problems.append(
            "a real run starts other processes: " + ", ".join(sorted(line for line in real_lines if "started " in line))
        )
    return problems


def check_table(
    sample: Sample, output: str, first: str, header_lines: int, row: re.Pattern, rows: str = "some"
) -> list[str]:
    """A tool's table: the sample starts with the tool's first line (the line matching `first`) and its first
    `header_lines` lines read as the tool prints them (rules of dashes aside). With the same command behind both,
    `rows="some"` takes the sample's rows for rows the tool prints, `rows="all"` for all of them; with another
    command behind the sample, `rows="none"` compares no rows."""
    shown = [line for line in sample.lines if line.strip()]
    real = [line for line in (LOG_PREFIX.sub("", x) for x in output.splitlines()) if line.strip()]
    start = next((i for i, line in enumerate(real) if re.match(first, line)), None)
    if start is None:
        return [f"the tool printed no line matching {first!r}"]
    problems = [
        f"`{a}` where the tool prints `{b}`"
        for a, b in zip(shown[:header_lines], real[start : start + header_lines])
        if template(a) != template(b) and not (set(a.strip()) <= {"-"} and set(b.strip()) <= {"-"})
    ]
    if rows != "none":
        labels = {m.group(1) for m in map(row.match, real[start:]) if m}
        shown_labels = {m.group(1) for m in map(row.match, shown[header_lines:]) if m}
        problems += [f"row `{label}`: not a row of a real run" for label in sorted(shown_labels - labels)]
        if rows == "all":
            problems += [f"row `{label}`: a real run prints it" for label in sorted(labels - shown_labels)]
    return problems


def _run(args: list[str], cwd: Path, timeout: float = 600) -> str:
    result = subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, f"{' '.join(args)}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout + result.stderr


CARTPOLE = ["-m", "sf_examples.train_gym_env", "--env=CartPole-v1", "--seed=1", "--restart_behavior=overwrite"]


@pytest.fixture(scope="module")
def serial_run(tmp_path_factory) -> tuple[Path, str]:
    """The getting-started run, shortened."""
    train_dir = tmp_path_factory.mktemp("docs_serial")
    output = _run(
        [
            *CARTPOLE,
            "--serial_mode=True",
            "--train_for_env_steps=4096",
            f"--train_dir={train_dir}",
            "--experiment=cartpole",
        ],
        ROOT,
    )
    return train_dir / "cartpole", output


def by_run(run: str) -> list[Sample]:
    return [s for s in samples() if s.run == run]


def _ids(items: list[Sample]) -> list[str]:
    return [f"{s.page}:{s.line}" for s in items]


def test_every_output_block_is_marked_with_its_run():
    unmarked = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in DOC_FILES
        for lang, body, run, line in _blocks(path)
        if run is None and lang in ("", "text") and LOOKS_LIKE_OUTPUT.search(LOG_PREFIX.sub("", body))
    ]
    assert unmarked == []


def test_the_checks_see_a_missing_wait_key_and_a_missing_header(serial_run):
    _, output = serial_run
    lines = [LOG_PREFIX.sub("", line) for line in output.splitlines()]
    start = lines.index("Learner 0 profile tree view:")
    tree = lines[start : start + 3]  # the tree line and its first lines, without the header above it
    assert any("wait_batch" in line for line in tree)
    without_wait = "\n".join(re.sub(r", wait_batch: [\d.]+|wait_batch: [\d.]+, ", "", line) for line in tree)
    problems = check_log(Sample("x", 1, "serial", without_wait), output)
    assert any("lacks" in p and "wait_batch" in p for p in problems)
    assert any("above the tree" in p for p in problems)


@pytest.mark.parametrize("sample", by_run("serial"), ids=_ids(by_run("serial")))
def test_serial_run_samples(sample, serial_run):
    exp_dir, output = serial_run
    assert check_log(sample, output.replace(str(exp_dir.parent), "train_dir")) == []  # the docs' --train_dir


@pytest.fixture(scope="module")
def enjoy_output(serial_run) -> str:
    exp_dir, _ = serial_run
    return _run(
        [
            "-m",
            "sf_examples.enjoy_gym_env",
            "--env=CartPole-v1",
            f"--train_dir={exp_dir.parent}",
            f"--experiment={exp_dir.name}",
            "--max_num_episodes=3",
        ],
        ROOT,
    )


@pytest.mark.parametrize("sample", by_run("enjoy"), ids=_ids(by_run("enjoy")))
def test_enjoy_samples(sample, enjoy_output):
    assert check_log(sample, enjoy_output) == []


@pytest.mark.parametrize("sample", by_run("custom model"), ids=_ids(by_run("custom model")))
def test_custom_model_samples(sample, custom_model_run):
    """Lines of the run of the training script written for Sample Factory (docs/customizing.md)."""
    assert check_log(sample, custom_model_run[2]) == []


class IntBoxActions(gymnasium.Env):
    """An env whose action space sf cannot lay out."""

    observation_space = gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gymnasium.spaces.Box(0, 5, (2,), np.int64)


@pytest.fixture(scope="module")
def error_output(tmp_path_factory) -> str:
    """What the scripts print for the errors the docs show, each from the command behind it, in this process."""
    from sf.cfg.arguments import parse_full_cfg
    from sf.envs import register_env, registry
    from sf.envs.families import family_named
    from sf.train import run_rl

    train_dir = f"--train_dir={tmp_path_factory.mktemp('docs_errors')}"
    err = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stderr(err):
        patch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))  # the registrations stay in this fixture
        patch.setattr(registry, "_VECTOR_REGISTRY", {})  # as in a fresh gymnasium-family process: no EnvPool envs
        register_env("int_box_actions", lambda *args, **kwargs: IntBoxActions())
        with pytest.raises(SystemExit):
            family_named("gym").cfg_or_exit(["--env=CartPole-v1", "--optimizer=lamb", train_dir])
        assert run_rl(family_named("gym").cfg_or_exit(["--env=CartPol-v1", train_dir])) == 2
        assert run_rl(parse_full_cfg(["--env=int_box_actions", train_dir])) == 2
        with pytest.raises(SystemExit):
            family_named("atari").cfg_or_exit(["--env=atari_spaceinvader", train_dir])
        assert run_rl(family_named("gym").cfg_or_exit(["--env=CartPole-v1", "--envpool=True", train_dir])) == 2
        pettingzoo = family_named("pettingzoo").cfg_or_exit(["--env=pettingzoo:no_such_package.env_v0", train_dir])
        assert run_rl(pettingzoo) == 2
    return err.getvalue()


@pytest.mark.parametrize("sample", by_run("errors"), ids=_ids(by_run("errors")))
def test_error_samples(sample, error_output):
    commands_left_out = "\n".join(line for line in sample.lines if not line.startswith("$ "))
    assert check_log(Sample(sample.page, sample.line, sample.run, commands_left_out), error_output) == []


@pytest.fixture(scope="module")
def train_two_agents(tmp_path_factory) -> str:
    """The multi-agent page's script, saved as the page says and run with the command its sample shows."""
    page = ROOT / "docs" / "multi-agent.md"
    command = next(s for s in by_run("train_two_agents") if s.lines[0].startswith("$ python train_two_agents.py"))
    tmp = tmp_path_factory.mktemp("train_two_agents")
    (tmp / "train_two_agents.py").write_text(command.code_before)
    assert "class SameSign" in command.code_before, f"{page}: the sample's script is not the block above it"
    args = command.lines[0].split()[3:]  # after `$ python train_two_agents.py`
    return _run([str(tmp / "train_two_agents.py"), *args, f"--train_dir={tmp}"], ROOT)


@pytest.mark.parametrize("sample", by_run("train_two_agents"), ids=_ids(by_run("train_two_agents")))
def test_train_two_agents_samples(sample, train_two_agents):
    commands_left_out = "\n".join(line for line in sample.lines if not line.startswith("$ "))
    assert check_log(Sample(sample.page, sample.line, sample.run, commands_left_out), train_two_agents) == []


@pytest.mark.parametrize("sample", by_run("python above"), ids=_ids(by_run("python above")))
def test_samples_of_the_python_above_them(sample):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(sample.code_before, sample.page, "exec"), {})
    assert check_log(sample, out.getvalue()) == []


@pytest.mark.parametrize("sample", by_run("simulation log"), ids=_ids(by_run("simulation log")))
def test_simulation_log_samples(sample, sleepy_run):
    """Lines of the simulation case's log (the run behind the report samples)."""
    assert check_log(sample, (sleepy_run / "sf_log.txt").read_text()) == []


REPORT_ROW = re.compile(r"^(\S+(?: \d+)?) +[\d.]+s ")
COMPARE_ROW = re.compile(r"^[ *] (\S+) ")


@pytest.mark.parametrize("sample", by_run("report simulation"), ids=_ids(by_run("report simulation")))
def test_report_samples(sample, sleepy_run):
    from sf.analysis.cli import run_report

    output = run_report(sleepy_run)
    assert check_table(sample, output, r"^component ", 1, REPORT_ROW, rows="all") == []
    verdicts = [line for line in sample.lines if line.startswith("verdict: ")]
    assert verdicts == [line for line in output.splitlines() if line.startswith("verdict: ")][: len(verdicts)]


@pytest.mark.parametrize("sample", by_run("compare simulation"), ids=_ids(by_run("compare simulation")))
def test_compare_samples(sample, sleepy_run):
    """The run diffed against itself, every key printed (the command prints the 30 largest changes)."""
    from sf.analysis.compare import compare, format_text
    from sf.analysis.run_data import load_experiment

    comparison = compare(load_experiment(sleepy_run), load_experiment(sleepy_run))
    output = format_text(comparison, top=len(comparison.rows))
    assert check_table(sample, output, r"^FPS: ", 3, COMPARE_ROW) == []


@pytest.mark.parametrize("sample", by_run("report (format)"), ids=_ids(by_run("report (format)")))
def test_report_format_samples(sample, sleepy_run):
    from sf.analysis.cli import run_report

    output = run_report(sleepy_run)
    fixed = re.compile(r"^(window: .*|component .*|who waits on whom:|  what if:)$")
    real = {template(line) for line in output.splitlines()}
    assert [line for line in sample.lines if fixed.match(line) and template(line) not in real] == []
    assert all(re.match(r"^verdict: [a-z]+-bound$", line) for line in sample.lines if line.startswith("verdict"))


@pytest.fixture(scope="module")
def envpool_output(tmp_path_factory) -> str:
    """The EnvPool page's Breakout run through EnvPool, shortened (slow tests only)."""
    train_dir = tmp_path_factory.mktemp("docs_envpool")
    flags = ["--env=atari_breakout", "--envpool=True", "--num_workers=2", "--num_envs_per_worker=4"]
    return _run(
        [
            "-m",
            "sf_examples.atari.train_atari",
            *flags,
            "--train_for_env_steps=8000",
            f"--train_dir={train_dir}",
            "--experiment=envpool",
        ],
        ROOT,
    )


@pytest.mark.slow
@pytest.mark.parametrize("sample", by_run("envpool"), ids=_ids(by_run("envpool")))
def test_envpool_samples(sample, envpool_output):
    assert check_log(sample, envpool_output) == []


@pytest.fixture(scope="module")
def parallel_output(tmp_path_factory) -> str:
    """The getting-started parallel run, shortened (slow tests only)."""
    train_dir = tmp_path_factory.mktemp("docs_parallel")
    flags = ["--num_workers=2", "--num_envs_per_worker=8", "--train_for_env_steps=30000", f"--train_dir={train_dir}"]
    return _run([*CARTPOLE, *flags, "--experiment=cartpole_parallel"], ROOT)


@pytest.mark.slow
@pytest.mark.parametrize("sample", by_run("parallel"), ids=_ids(by_run("parallel")))
def test_parallel_run_samples(sample, parallel_output):
    assert check_log(sample, parallel_output) == []


BREAKDOWN_ROW = re.compile(r"^(\S+(?: \d+)?/\S+) +[\d.]+ ")
BENCHMARK_ROW = re.compile(r"^(simulator ceiling|sampling only|training) ")


@pytest.mark.slow
@pytest.mark.parametrize("sample", by_run("breakdown"), ids=_ids(by_run("breakdown")))
def test_breakdown_samples(sample, tmp_path):
    output = _run(
        [
            "-m",
            "sf.profile",
            "breakdown",
            "--calibration_pairs=1",
            "--",
            "--env=CartPole-v1",
            "--train_for_env_steps=8000",
            "--device=cpu",
            f"--train_dir={tmp_path}",
        ],
        ROOT,
    )
    assert check_table(sample, output, r"^cross-stack breakdown \(", 3, BREAKDOWN_ROW, rows="none") == []


@pytest.mark.slow
@pytest.mark.parametrize("sample", by_run("benchmark"), ids=_ids(by_run("benchmark")))
def test_env_benchmark_samples(sample, tmp_path):
    output = _run(
        [
            "-m",
            "sf.benchmark",
            "--env=CartPole-v1",
            "--num_workers=2",
            "--num_envs_per_worker=16",
            "--phase_s=5",
            f"--train_dir={tmp_path}",
        ],
        ROOT,
    )
    assert check_table(sample, output, r"^\S+: \d+ workers x ", 3, BENCHMARK_ROW, rows="all") == []


def test_the_progress_line_check_sees_a_part_the_program_cannot_print(serial_run):
    _, output = serial_run
    line = next(line for line in output.splitlines() if "Fps is (" in line)
    good = line.split(". Done:")[0] + ". Done: 52 % of 200,000 frames, about 9 s left"
    assert check_log(Sample("x", 1, "serial", good), output) == []
    for bad in (good.replace("Done:", "Progress:"), good.replace("Total num frames", "Frames")):
        assert any("no real progress line" in p for p in check_log(Sample("x", 1, "serial", bad), output))
