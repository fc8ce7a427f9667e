"""Every profiling command in the docs runs as written, with only the run shortened (flags appended at the end)
and the GPU profilers replaced by the recording stub of test_profiling_external."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from test_profiling_external import install_stub

SHORT_RUN = [
    "--train_for_env_steps=1500",
    "--num_workers=2",
    "--num_envs_per_worker=2",
    "--batch_size=128",
    "--use_rnn=False",
    "--encoder_mlp_layers",
    "16",
    "--decorrelate_envs_on_one_worker=False",
]
BLOCK = re.compile(r"```bash\n(.*?)```", re.S)
TOOLS = {
    "python": sys.executable,
    "pyinstrument": str(Path(sys.executable).parent / "pyinstrument"),
    "py-spy": str(Path(sys.executable).parent / "py-spy"),
}


def doc_commands(page: str) -> list[str]:
    text = (ROOT / "docs" / page).read_text()
    lines = "\n".join(BLOCK.findall(text)).replace("\\\n", " ").splitlines()
    return [line.split("  #")[0].strip() for line in lines if line.strip() and not line.startswith("#")]


def runnable(command: str) -> list[str]:
    tokens = [TOOLS.get(token, token) for token in shlex.split(command)]
    tokens = [str(ROOT / token) if "/" in token and (ROOT / token).is_file() else token for token in tokens]
    return tokens + SHORT_RUN if any("sf_examples" in token for token in tokens) else tokens


COMMANDS = [
    (page, i, command) for page in ("profiling.md", "serial-mode.md") for i, command in enumerate(doc_commands(page))
]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> tuple[Path, dict]:
    """One folder per module run: a command may read what the one before it wrote (pstats after cProfile)."""
    root = tmp_path_factory.mktemp("doc_commands")
    bin_dir = root / "bin"
    for binary in ("nsys", "rocprof-sys-python"):
        install_stub(bin_dir, binary, root / f"{binary}.jsonl")
    env = dict(
        os.environ,
        PYTHONUNBUFFERED="1",
        PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    )
    return root, env


@pytest.mark.slow
@pytest.mark.parametrize("page, index, command", COMMANDS, ids=[f"{page}:{i}" for page, i, _ in COMMANDS])
def test_documented_profiling_command_runs(page, index, command, workspace):
    root, env = workspace
    work = root / page
    work.mkdir(exist_ok=True)
    result = subprocess.run(runnable(command), cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{command}\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
    experiment = re.search(r"--experiment=(\S+)", command)
    if experiment and ("--profiling_backend" in command or "--cfg profile/" in command):
        assert any((work / "train_dir" / experiment.group(1) / "profiling").iterdir()), command
    output = re.search(r"-o (\S+)", command)
    if output:
        assert (work / output.group(1)).stat().st_size > 0, command
