"""Resources of a process as profile.json reports them, checked against the operating system's own figures."""

import mmap
import os
import time

import numpy as np
import pytest

from sf.profiling import resources


def test_cpu_seconds_follow_the_work_done():
    before = resources.snapshot()
    times_before = os.times()
    end = time.process_time() + 0.3
    while time.process_time() < end:
        pass
    after = resources.snapshot()
    times_after = os.times()
    spent = (after.cpu_user_s + after.cpu_system_s) - (before.cpu_user_s + before.cpu_system_s)
    expected = (times_after.user + times_after.system) - (times_before.user + times_before.system)
    assert spent == pytest.approx(expected, abs=0.03)
    assert spent >= 0.25
    assert after.wall_s >= before.wall_s + 0.25
    assert after.gpu_peak_mem_bytes is None and after.gpu_busy_s is None


def _rss() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))


def test_peak_rss_remembers_a_freed_allocation():
    before = _rss()
    block = mmap.mmap(-1, 300 * 2**20)  # its own mapping, so freeing it returns it whatever malloc is told to keep
    np.frombuffer(block, dtype=np.uint8)[:] = 1  # touched, so resident
    rss_now = _rss()
    block.close()
    peak = resources.snapshot().peak_rss_bytes
    # the kernel batches its RSS counters per thread, so the recorded peak may trail by a few pages
    assert peak >= rss_now - 2**20 and rss_now >= before + 250 * 2**20 and _rss() < rss_now


def test_no_gpu_meter_on_cpu():
    assert resources.start_gpu_meter("cpu", sync=True) is None


def test_header_line():
    res = {
        "wall_s": 120.34,
        "cpu_user_s": 80.0,
        "cpu_system_s": 5.1,
        "peak_rss_bytes": int(1.2 * 2**30),
        "gpu_peak_mem_bytes": None,
        "gpu_busy_s": None,
    }
    activity = {"lifetime_s": 100.0, "work_s": 61.0, "wait_s": 37.0, "overhead_s": 2.0, "waits": {"wait_batch": 37.0}}
    assert resources.header("Learner 0", res) == "Learner 0: cpu 85.1 s of 120.3 s, rss 1.2 GiB"
    assert resources.header("Learner 0", res, activity).endswith("; work 61 %, wait 37 %, loop 2 %")
    gpu = dict(res, gpu_peak_mem_bytes=3 * 2**30, gpu_busy_s=40.04)
    assert resources.header("Learner 0", gpu) == (
        "Learner 0: cpu 85.1 s of 120.3 s, rss 1.2 GiB, gpu memory 3.0 GiB, gpu busy 40.0 s"
    )
