"""keep_freed_memory: once warm, a large tensor allocated again reuses the heap instead of faulting in new pages,
and the memory kept stays bounded."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PROBE = """
import json, resource, sys, torch
from sf.utils.allocator import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory()
faults = []
for _ in range(24):  # 100 MB allocated and freed, as a learner's activations are every step
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    torch.ones(25_000_000)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
rss_mb = int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
print(json.dumps({"faults": faults, "rss_mb": rss_mb}))
"""


def probe(mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_freed_tensor_memory_is_reused_without_page_faults():
    default, keep = probe("default"), probe("keep")
    assert min(default["faults"][-8:]) > 10_000  # every time 24,000 pages of 4 KiB come back from the OS
    assert max(keep["faults"][-8:]) < 1_000
    assert keep["rss_mb"] < 2_000  # a few freed blocks are held, not one per allocation
