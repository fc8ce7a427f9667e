"""`--backend=ray` against `--backend=local` on a two-node Ray cluster simulated on this machine (both nodes on the
loopback interface): a suite of `sf.benchmark` with every rollout worker on the second node, each run between two
local runs in the same invocation (its figure is its FPS over the mean of its two neighbours, which cancels a machine
whose load drifts), and what crossed between the nodes: trajectory bytes per env frame and weight bytes per update,
as the node agent counted them.

    python benchmarks/bench_ray_cluster.py [--suite doom] [--rounds 1] [--frames 60000] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # before Ray is imported: the nodes bind to 127.0.0.1

from ray.cluster_utils import Cluster  # noqa: E402

from sf.benchmark import SUITES  # noqa: E402

SECOND = "sf_bench_node2"
STORE_BYTES = 512 * 1024**2


def run(suite, flags: list[str], repo: Path) -> dict:
    """One training run in a fresh folder: its summary, and its node agent's transfer counts (ray runs)."""
    with tempfile.TemporaryDirectory(prefix="sf_bench_ray_") as train_dir:
        cmd = [sys.executable, "-m", suite.module, *suite.flags, *flags, f"--train_dir={train_dir}", "--experiment=b"]
        result = subprocess.run(cmd, cwd=repo, capture_output=True, text=True)
        exp = Path(train_dir) / "b"
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
        summary = json.loads((exp / "summary.json").read_text())
        profile = json.loads((exp / "profile.json").read_text())
    transfer = next((entry["transfer"] for entry in profile.values() if "transfer" in entry), None)
    return {"fps": summary["fps"], "frames": sum(summary["env_frames"].values()), "transfer": transfer}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="doom", choices=sorted(SUITES))
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--frames", type=int, default=60_000)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    suite = SUITES[args.suite]
    workers = int(next(f for f in suite.flags if f.startswith("--num_workers=")).split("=")[1])
    repo = Path(__file__).resolve().parents[1]
    cluster = Cluster(
        initialize_head=True,
        connect=False,
        head_node_args=dict(num_cpus=1, object_store_memory=STORE_BYTES, include_dashboard=False),
    )
    cluster.add_node(num_cpus=1, resources={SECOND: workers}, object_store_memory=STORE_BYTES)
    try:
        cluster.wait_for_nodes()
        frames = [f"--train_for_env_steps={args.frames}"]
        remote = [
            *frames,
            "--backend=ray",
            f"--ray_address={cluster.address}",
            f"--ray_worker_groups={SECOND}:{workers}",
        ]
        local_fps, ray_fps, ratios, transfers = [], [], [], []
        before = run(suite, frames, repo)["fps"]
        local_fps.append(before)
        for round_ in range(args.rounds):
            on_ray = run(suite, remote, repo)
            after = run(suite, frames, repo)["fps"]
            local_fps.append(after)
            ray_fps.append(on_ray["fps"])
            ratios.append(on_ray["fps"] / ((before + after) / 2))
            transfers.append(on_ray["transfer"])
            print(
                f"round {round_}: ray {on_ray['fps']:.0f} FPS, local around it {before:.0f} / {after:.0f}", flush=True
            )
            before = after
    finally:
        cluster.shutdown()
    # the counts are numbers; `driver` (the driver's Timing tree of the link) is not summed
    sent = {key: sum(t[key] for t in transfers) for key, value in transfers[0].items() if isinstance(value, int)}
    per_frame = sent["bytes_sent"] / sent["frames_sent"]
    per_update = sent["weight_bytes_received"] / sent["weight_updates"]
    print(
        "| suite | local FPS | ray FPS (all workers on node 2) | share of local | bytes per frame | "
        "bytes per weight update |\n| --- | --- | --- | --- | --- | --- |"
    )
    print(
        f"| {args.suite} | {statistics.mean(local_fps):.0f} | {statistics.mean(ray_fps):.0f} | "
        f"{statistics.mean(ratios):.2f} | {per_frame:.0f} | {per_update:.0f} |"
    )
    for name, bytes_per_s in (("1 GbE", 125e6), ("10 GbE", 1.25e9)):
        print(f"{name}: trajectories alone saturate the link at {bytes_per_s / per_frame:,.0f} frames/s")
    if args.out:
        Path(args.out).write_text(
            json.dumps(
                {
                    "local_fps": local_fps,
                    "ray_fps": ray_fps,
                    "ratio": ratios,
                    "transfers": transfers,
                    "bytes_per_frame": per_frame,
                    "bytes_per_weight_update": per_update,
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
