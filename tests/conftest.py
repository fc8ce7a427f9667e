import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_sf(args: list[str], timeout: float = 300, module: str = "sf_examples.train_gym_env", **kwargs) -> subprocess.CompletedProcess:
    """Run an sf entry point as a user would, in its own process."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout, **kwargs)


@pytest.fixture
def shm_before():
    """/dev/shm entries present before the test; the test asserts nothing new is left behind."""
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
