"""`--backend=ray` against `--backend=local` on a two-node Ray cluster made on this machine: a suite of `sf.benchmark`
with every rollout worker on the second node, each run between two local runs in the same invocation (its share is
its FPS over the mean of its two neighbours, which cancels a machine whose load drifts), what crossed between the
nodes (trajectory bytes per env frame and weight bytes per update as the node agent counted them, and with
`--hosts=netns` the bytes the link itself carried), and where the CPU went (`--cpu`).

    python -m sf.bench.ray_cluster [--suite doom] [--rounds 1] [--frames N] [--hosts loopback] [--cpu] [--keep DIR]
        [--out results.json]

`--frames` defaults to the suite's own length (CartPole 1M frames, Doom 250k), so that a share is the suite's: a
shorter run weighs the second node's start-up more.

`--hosts=loopback`: both nodes on the loopback interface (Ray's `cluster_utils`), each with its own object store.
`--hosts=netns`: two hosts that are real to Ray: two network namespaces made here, joined by a veth pair that
`tc netem` limits to `--link_rate` with `--link_delay` each way, the head node in one and the second node in the
other, with addresses only on that pair (10.200.0.1 and 10.200.0.2); the driver and the local runs run in the head's
namespace. Everything it made (namespaces, the pair, the Ray processes, their folders) is removed at the end, on a
failure too. Needs root and iproute2; where the kernel has no netem, the rate is kept with `tbf` and the delay is
left out, which the output says.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

import psutil

from sf.bench.suites import SUITES

SECOND = "sf_bench_node2"  # the second node's custom resource: pins every rollout worker there
STORE_BYTES = 512 * 1024**2
RAY_PORT = 6379
HEAD_IP, NODE_IP, PREFIX_LEN = "10.200.0.1", "10.200.0.2", 24
# what Ray lets a one-machine benchmark turn off: the dashboard (with its agents' metrics) and usage reports
RAY_QUIET_ENV = {"RAY_USAGE_STATS_ENABLED": "0"}
RAY_CODE = str(Path(psutil.__file__).parents[1] / "ray")  # Ray's daemons written in Python run scripts from here


# where the CPU goes -------------------------------------------------------------------------------------------
def cpu_group(proc: psutil.Process) -> str:
    """The group a process of the benchmark's tree belongs to: the node agent, the processes it started on the second
    node (forked by its fork server), Ray's own daemons and idle workers, or the training run's processes on the
    driver's node."""
    if _is_agent(proc):
        return "node agent"
    if any(_is_agent(parent) for parent in proc.parents()):
        return "second node's sf processes"
    name, args = proc.name(), proc.cmdline()
    ray_start = "start" in args and any(Path(arg).name == "ray" for arg in args[:2])
    # a script of Ray's (dashboard agent, runtime env agent, monitors); not a fork server, whose arguments hold the
    # sys.path of the process that started it, Ray's folders included
    ray_script = any(arg.startswith(RAY_CODE) and arg.endswith(".py") for arg in args[1:3])
    if name in ("gcs_server", "raylet") or name.startswith("ray::") or ray_start or ray_script:
        return "ray daemons"
    return "driver's node sf processes"


def _is_agent(proc: psutil.Process) -> bool:
    """Ray titles an actor's process after its class (`ray::NodeAgent...`), in its command line."""
    title = proc.cmdline()[:1]
    return proc.name().startswith("ray::NodeAgent") or (bool(title) and title[0].startswith("ray::NodeAgent"))


class TreeCpu:
    """CPU seconds of every process under this one, by group, sampled while a run goes (a process is counted
    from its first sample: one that lives less than `interval_s` may be missed), and the machine's CPU spent outside
    this tree (other jobs) in the same time."""

    def __init__(self, interval_s: float = 0.25):
        self.interval_s = interval_s
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.group: dict[int, str] = {}
        self.stop = threading.Event()
        self._sample(baseline=True)  # the cluster's daemons count from here, not from their own start
        self.machine = psutil.cpu_times()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _sample(self, baseline: bool = False) -> None:
        for proc in psutil.Process().children(recursive=True):
            try:
                times = proc.cpu_times()
                if proc.pid not in self.group:
                    self.group[proc.pid] = cpu_group(proc)
            except psutil.Error:
                continue
            self.first.setdefault(proc.pid, times.user + times.system if baseline else 0.0)
            self.last[proc.pid] = times.user + times.system

    def _loop(self) -> None:
        while not self.stop.wait(self.interval_s):
            self._sample()

    def finish(self) -> dict[str, float]:
        self.stop.set()
        self.thread.join()
        self._sample()
        now = psutil.cpu_times()
        busy = sum(now) - now.idle - (sum(self.machine) - self.machine.idle)
        groups: dict[str, float] = defaultdict(float)
        for pid, seconds in self.last.items():
            groups[self.group[pid]] += seconds - self.first[pid]
        groups["outside this benchmark"] = max(0.0, busy - sum(groups.values()))
        return dict(groups)


# the two clusters -----------------------------------------------------------------------------------------
class LoopbackCluster:
    """Both nodes on 127.0.0.1, each with its own raylet and object store (Ray's cluster_utils)."""

    wrap: list[str] = []
    link = "loopback"

    def __init__(self, workers: int):
        # before Ray is imported, here and in the driver: every node and the driver bind to 127.0.0.1
        os.environ.update(RAY_QUIET_ENV, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
        self.env = dict(os.environ)
        from ray.cluster_utils import Cluster

        self.cluster = Cluster(
            initialize_head=True,
            connect=False,
            head_node_args=dict(num_cpus=1, object_store_memory=STORE_BYTES, include_dashboard=False),
        )
        self.cluster.add_node(num_cpus=1, resources={SECOND: workers}, object_store_memory=STORE_BYTES)
        self.cluster.wait_for_nodes()
        self.address = self.cluster.address

    def wire_bytes(self) -> dict[str, int] | None:
        return None

    def close(self) -> None:
        self.cluster.shutdown()


def ip(*args: str) -> str:
    return subprocess.run(["ip", *args], check=True, capture_output=True, text=True).stdout


class NamespaceCluster:
    """A head node and a second node in two network namespaces joined by a shaped veth pair."""

    def __init__(self, workers: int, rate: str, delay: str):
        for tool in ("ip", "tc"):
            if shutil.which(tool) is None:
                raise RuntimeError(f"--hosts=netns needs `{tool}` (iproute2)")
        if os.geteuid() != 0:
            raise RuntimeError("--hosts=netns needs root (it creates network namespaces)")
        tag = str(os.getpid())
        self.ns = {"head": f"sf_head_{tag}", "node": f"sf_node_{tag}"}
        self.veth = {"head": f"sfh{tag}", "node": f"sfn{tag}"}
        self.ray_start: list[subprocess.Popen] = []
        self.folders: list[str] = []
        self.made: list[str] = []
        self.wrap = ["ip", "netns", "exec", self.ns["head"]]
        # nodes and the driver bind to their namespace's address (not to 127.0.0.1 only, as a loopback cluster does)
        self.env = {k: v for k, v in os.environ.items() if k != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"} | RAY_QUIET_ENV
        self.address = f"{HEAD_IP}:{RAY_PORT}"
        try:
            self.link = self._make_link(rate, delay)
            self._start_ray(workers)
        except BaseException:
            self.close()
            raise

    def _make_link(self, rate: str, delay: str) -> str:
        for ns in self.ns.values():
            ip("netns", "add", ns)
            self.made.append(ns)
        ip("link", "add", "name", self.veth["head"], "type", "veth", "peer", "name", self.veth["node"])
        for side, address in (("head", HEAD_IP), ("node", NODE_IP)):
            ns, dev = self.ns[side], self.veth[side]
            ip("link", "set", dev, "netns", ns)
            ip("-n", ns, "addr", "add", f"{address}/{PREFIX_LEN}", "dev", dev)
            ip("-n", ns, "link", "set", dev, "up")
            ip("-n", ns, "link", "set", "lo", "up")
        link = f"veth, netem rate {rate} delay {delay} each way"
        for side in ("head", "node"):
            shape = ["tc", "-n", self.ns[side], "qdisc", "add", "dev", self.veth[side], "root"]
            netem = subprocess.run([*shape, "netem", "rate", rate, "delay", delay], capture_output=True, text=True)
            if netem.returncode != 0:  # a kernel without sch_netem: keep the rate, say the delay is missing
                subprocess.run([*shape, "tbf", "rate", rate, "burst", "256kb", "latency", "10ms"], check=True)
                link = f"veth, tbf rate {rate} each way, no delay (netem: {netem.stderr.strip()})"
        return link

    def _start_ray(self, workers: int) -> None:
        env = self.env
        ray_bin = str(Path(sys.executable).with_name("ray"))
        common = ["--block", "--num-cpus=1", f"--object-store-memory={STORE_BYTES}", "--disable-usage-stats"]
        head = ["--head", f"--port={RAY_PORT}", f"--node-ip-address={HEAD_IP}", "--include-dashboard=false"]
        node = [
            f"--address={self.address}",
            f"--node-ip-address={NODE_IP}",
            "--resources=" + json.dumps({SECOND: workers}),
        ]
        for side, extra in (("head", head), ("node", node)):
            folder = tempfile.mkdtemp(prefix=f"sf_ray_{side}_")
            self.folders.append(folder)
            log = Path(folder) / "ray_start.log"
            cmd = ["ip", "netns", "exec", self.ns[side], ray_bin, "start", *common, *extra, f"--temp-dir={folder}"]
            with log.open("w") as out:
                self.ray_start.append(subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=folder))
            self._wait_until(lambda log=log: "Ray runtime started" in log.read_text(), f"`ray start` ({side})", log)
        probe = f"import ray; ray.init(address={self.address!r}); print(len([n for n in ray.nodes() if n['Alive']]))"

        def two_nodes() -> bool:
            out = subprocess.run([*self.wrap, sys.executable, "-c", probe], capture_output=True, text=True, env=env)
            return out.stdout.split()[-1:] == ["2"]

        self._wait_until(two_nodes, "the second node joining", None)

    def _wait_until(self, ready, what: str, log: Path | None, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():
            if any(proc.poll() is not None for proc in self.ray_start) or time.monotonic() > deadline:
                tail = log.read_text()[-2000:] if log else ""
                raise RuntimeError(f"{what} failed in a network namespace within {timeout_s:.0f} s\n{tail}")
            time.sleep(0.5)

    def wire_bytes(self) -> dict[str, int]:
        """Bytes the head's end of the pair received (node -> driver) and sent (driver -> node) so far."""
        link = json.loads(ip("-n", self.ns["head"], "-s", "-j", "link", "show", "dev", self.veth["head"]))[0]
        stats = link["stats64"]
        return {"to_driver": stats["rx"]["bytes"], "to_node": stats["tx"]["bytes"]}

    def close(self) -> None:
        """End every process in the namespaces (by pid), then remove them (the pair goes with them)."""
        for sig, wait_s in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            pids = self._pids()
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + wait_s
            while self._pids() and time.monotonic() < deadline:
                time.sleep(0.1)
        for proc in self.ray_start:
            proc.wait(timeout=5.0)
        for ns in self.made:
            subprocess.run(["ip", "netns", "del", ns], check=False)
        for folder in self.folders:
            shutil.rmtree(folder, ignore_errors=True)

    def _pids(self) -> list[int]:
        pids = []
        for ns in self.made:
            out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
            pids += [int(pid) for pid in out.split()]
        return pids


# the runs -----------------------------------------------------------------------------------------------------
def run(suite, flags: list[str], repo: Path, cluster, cpu: bool, keep: Path | None) -> dict:
    """One training run in a fresh folder: its FPS, the node agent's transfer counts (ray runs), the bytes the link
    carried (netns) and the CPU seconds by group (`cpu`); its experiment folder is copied to `keep` for
    `python -m sf.profile report`."""
    with tempfile.TemporaryDirectory(prefix="sf_bench_ray_") as train_dir:
        cmd = [
            *cluster.wrap,
            sys.executable,
            "-m",
            suite.module,
            *suite.flags,
            *flags,
            f"--train_dir={train_dir}",
            "--experiment=b",
        ]
        wire_before = cluster.wire_bytes()
        sampler = TreeCpu() if cpu else None
        proc = subprocess.Popen(
            cmd, cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=cluster.env
        )
        try:
            output, _ = proc.communicate()
        finally:
            stop_run(proc)
        groups = sampler.finish() if sampler else None
        wire_after = cluster.wire_bytes()
        exp = Path(train_dir) / "b"
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{output[-6000:]}")
        summary = json.loads((exp / "summary.json").read_text())
        profile = json.loads((exp / "profile.json").read_text())
        if keep is not None:
            shutil.copytree(exp, keep)
    transfer = next((entry["transfer"] for entry in profile.values() if "transfer" in entry), None)
    return {
        "fps": summary["fps"],
        "fps_steady": summary["fps_steady"],
        "frames": sum(summary["env_frames"].values()),
        "transfer": transfer,
        "wire": {key: wire_after[key] - wire_before[key] for key in wire_after} if wire_after else None,
        "cpu_s": groups,
    }


def stop_run(proc: subprocess.Popen, timeout_s: float = 30.0) -> None:
    """A run still going when the benchmark ends (an error, SIGTERM, Ctrl-C) is stopped as a user would stop it, so it
    ends its processes and frees its shared memory before the cluster goes away; killed if it does not stop."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def print_cpu(label: str, result: dict) -> None:
    per = 1e5 / result["frames"]
    groups = sorted(result["cpu_s"].items(), key=lambda kv: -kv[1])
    print(f"  {label} CPU s per 100k frames: " + ", ".join(f"{k} {v * per:.2f}" for k, v in groups), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="doom", choices=sorted(SUITES))
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--frames", type=int, default=None, help="env frames of each run (default: the suite's)")
    parser.add_argument("--hosts", default="loopback", choices=("loopback", "netns"))
    parser.add_argument("--link_rate", default="1gbit", help="--hosts=netns: the pair's rate each way (tc syntax)")
    parser.add_argument("--link_delay", default="0.2ms", help="--hosts=netns: the pair's delay each way (tc syntax)")
    parser.add_argument("--cpu", action="store_true", help="CPU seconds of each process group per run")
    parser.add_argument("--out", default=None)
    parser.add_argument("--keep", default=None, help="copy each run's experiment folder under this one")
    args = parser.parse_args()
    suite = SUITES[args.suite]
    workers = int(next(f for f in suite.flags if f.startswith("--num_workers=")).split("=")[1])
    repo = Path(__file__).resolve().parents[2]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # a terminated benchmark still removes what it made
    if args.hosts == "netns":
        cluster = NamespaceCluster(workers, args.link_rate, args.link_delay)
    else:
        cluster = LoopbackCluster(workers)
    print(f"cluster: {args.hosts} ({cluster.link}), head at {cluster.address}", flush=True)
    try:
        frames = [f"--train_for_env_steps={args.frames}"] if args.frames else []
        remote = [
            *frames,
            "--backend=ray",
            f"--ray_address={cluster.address}",
            f"--ray_worker_groups={SECOND}:{workers}",
        ]
        local_runs, ray_runs, ratios, steady_ratios = [], [], [], []
        keep = Path(args.keep) if args.keep else None

        def kept(name: str) -> Path | None:
            return keep / name if keep else None

        local_runs.append(run(suite, frames, repo, cluster, args.cpu, kept("local_0")))
        for round_ in range(args.rounds):
            on_ray = run(suite, remote, repo, cluster, args.cpu, kept(f"ray_{round_}"))
            local_runs.append(run(suite, frames, repo, cluster, args.cpu, kept(f"local_{round_ + 1}")))
            before, after = local_runs[-2], local_runs[-1]
            ray_runs.append(on_ray)
            ratios.append(on_ray["fps"] / ((before["fps"] + after["fps"]) / 2))
            steady_ratios.append(on_ray["fps_steady"] / ((before["fps_steady"] + after["fps_steady"]) / 2))
            print(
                f"round {round_}: ray {on_ray['fps']:.0f} FPS (steady {on_ray['fps_steady']:.0f}), local around it "
                f"{before['fps']:.0f} / {after['fps']:.0f} (steady {before['fps_steady']:.0f} / "
                f"{after['fps_steady']:.0f}): share {ratios[-1]:.2f} (steady {steady_ratios[-1]:.2f})",
                flush=True,
            )
            if args.cpu:
                print_cpu("local", before)
                print_cpu("ray", on_ray)
    finally:
        cluster.close()
    transfers = [r["transfer"] for r in ray_runs]
    # the counts are numbers; `driver` (the driver's Timing tree of the link) is not summed
    sent = {key: sum(t[key] for t in transfers) for key, value in transfers[0].items() if isinstance(value, int)}
    per_frame = sent["bytes_sent"] / sent["frames_sent"]
    per_update = sent["weight_bytes_received"] / sent["weight_updates"]
    wire_per_frame = None
    if ray_runs[0]["wire"] is not None:
        wire_per_frame = sum(r["wire"]["to_driver"] for r in ray_runs) / sum(r["frames"] for r in ray_runs)
    print(
        "| suite | hosts | local FPS | ray FPS (all workers on node 2) | share of local (steady) | bytes per frame | "
        "link bytes per frame to the driver | bytes per weight update |\n" + "| --- " * 8 + "|"
    )
    print(
        f"| {args.suite} | {args.hosts} | {statistics.mean(r['fps'] for r in local_runs):.0f} | "
        f"{statistics.mean(r['fps'] for r in ray_runs):.0f} | {statistics.mean(ratios):.2f} "
        f"({statistics.mean(steady_ratios):.2f}) | {per_frame:.0f} | "
        f"{'-' if wire_per_frame is None else f'{wire_per_frame:.0f}'} | {per_update:.0f} |"
    )
    for name, bytes_per_s in (("1 GbE", 125e6), ("10 GbE", 1.25e9)):
        print(f"{name}: trajectories alone saturate the link at {bytes_per_s / per_frame:,.0f} frames/s")
    if args.out:
        Path(args.out).write_text(
            json.dumps(
                {
                    "suite": args.suite,
                    "hosts": args.hosts,
                    "link": cluster.link,
                    "local": local_runs,
                    "ray": ray_runs,
                    "ratio": ratios,
                    "steady_ratio": steady_ratios,
                    "bytes_per_frame": per_frame,
                    "link_bytes_per_frame": wire_per_frame,
                    "bytes_per_weight_update": per_update,
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
