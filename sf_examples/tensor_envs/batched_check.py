"""The device check's batched step: the torch Pendulum of `sf_examples.tensor_envs` on the device, stepped bare and
trained with `--batched_sampling=True` in serial mode, counting how its observations travel.

`python -m sf_examples.tensor_envs.batched_check --device=gpu --copies=4096 --frames=2000000 --out DIR` writes
`DIR/batched.json`: the bare env's copies stepped per second (random actions, nothing else), the training run's
steady FPS, and per env step the observation copies the run made and how many of them landed in host memory (a copy
from the GPU into the shared trajectory buffers counts one; a round trip through numpy or a concatenation would count
more). With
`--device=cpu` the same runs on the CPU, where no copy crosses to the host. The device check
(`sf.bench.device_check`, its `batched` step) starts it as a process of its own: the training runs in that process
(serial mode), so that the env's tensors can be followed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from sf_examples.tensor_envs.torch_classic import TensorPendulum

COPYING = {"copy_", "clone", "cat", "stack", "cpu", "numpy", "to", "contiguous", "index_select", "tolist", "__array__"}


class CountedObs(torch.Tensor):
    """Observation rows that log every function reading their data into a new place: its name and where it went."""

    log: list[tuple[str, bool]] = []  # (function, whether the data left the GPU for host memory)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", str(func))
        if name in COPYING:
            CountedObs.log.append((name, _to_host(name, args)))
        return super().__torch_function__(func, types, args, kwargs)  # views of the rows stay counted


def _to_host(name: str, args: tuple) -> bool:
    """Whether this copy moves data from a GPU into host memory."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if name == "copy_" and len(tensors) >= 2:
        return tensors[0].device.type == "cpu" and tensors[1].device.type != "cpu"
    return name in ("cpu", "numpy", "tolist", "__array__") and any(t.device.type != "cpu" for t in tensors)


class CountedPendulum(TensorPendulum):
    steps_taken = 0

    def step(self, actions):
        CountedPendulum.steps_taken += 1
        return super().step(actions)

    def _obs(self) -> torch.Tensor:
        return super()._obs().as_subclass(CountedObs)


def bare_rate(copies: int, device: str, steps: int = 200) -> float:
    """Copies stepped per second by the env alone, random actions on its device."""
    env = TensorPendulum(copies, device, seed=0)
    env.reset()
    actions = torch.rand(copies, 1, device=device) * 4 - 2
    for _ in range(20):
        env.step(actions)
    _sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        env.step(actions)
    _sync(device)
    return copies * steps / (time.perf_counter() - start)


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def measure(device: str, copies: int, frames: int, out: Path) -> dict:
    from sf.cfg.arguments import parse_full_cfg
    from sf.envs.registry import register_env
    from sf.train import run_rl
    from sf_examples.tensor_envs.tensor_envs import tensor_env_defaults

    env_device = "cuda" if device == "gpu" else "cpu"
    result: dict = {"device": device, "env_device": env_device, "copies": copies}
    result["bare_copies_per_s"] = bare_rate(copies, env_device)
    register_env("counted_tensor_pendulum", lambda *args, **kwargs: CountedPendulum(copies, env_device, seed=0))
    CountedObs.log = []
    CountedPendulum.steps_taken = 0
    cfg = parse_full_cfg(
        [
            "--env=counted_tensor_pendulum",
            f"--device={device}",
            "--serial_mode=True",
            f"--env_agents={copies}",
            f"--batch_size={copies * 8}",
            f"--train_for_env_steps={frames}",
            f"--train_dir={out / 'runs'}",
            "--experiment=batched",
            "--restart_behavior=overwrite",
        ],
        defaults=lambda _: tensor_env_defaults("tensor_pendulum"),
    )
    result["status"] = run_rl(cfg)
    summary_path = out / "runs" / "batched" / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    steps = max(1, CountedPendulum.steps_taken)
    first_host = int(CountedObs.log[0][1]) if CountedObs.log else 0
    result.update(
        {
            "fps_steady": summary.get("fps_steady"),
            "fps": summary.get("fps"),
            "env_steps": CountedPendulum.steps_taken,
            # the worker's first reset copies once before any step: left out of the per-step figures
            "obs_copies_per_step": (len(CountedObs.log) - 1) / steps,
            "obs_host_copies_per_step": (sum(host for _, host in CountedObs.log) - first_host) / steps,
            "obs_copy_kinds": sorted({name for name, _ in CountedObs.log}),
            "obs_bytes_per_step": copies * 3 * 4,
        }
    )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sf_examples.tensor_envs.batched_check", description=__doc__)
    parser.add_argument("--device", choices=("gpu", "cpu"), default="gpu")
    parser.add_argument("--copies", type=int, default=4096)
    parser.add_argument("--frames", type=int, default=2_000_000)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = measure(args.device, args.copies, args.frames, out)
    (out / "batched.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result), flush=True)
    return 0 if result["status"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
