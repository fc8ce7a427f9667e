"""keep_freed_memory: a large tensor allocated again after a free reuses the heap instead of faulting in new pages."""
from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import resource, sys, torch
from sf.utils.allocator import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory()
torch.ones(25_000_000)  # 100 MB, allocated and freed
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
torch.ones(25_000_000)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults_of_second_allocation(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_freed_tensor_memory_is_reused_without_page_faults():
    assert faults_of_second_allocation("default") > 10_000  # 24,000 pages of 4 KiB come back from the OS
    assert faults_of_second_allocation("keep") < 1_000

