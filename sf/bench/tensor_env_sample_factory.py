"""Sample Factory 2.1.1's side of the `tensor_pendulum` suite, run as a script by Sample Factory's interpreter:
`<sample-factory python> tensor_env_sample_factory.py --env=tensor_pendulum --env_agents=1024 ...`.

It registers the very env classes sf trains (`sf_examples/tensor_envs/torch_classic.py`, loaded from its file: the
module imports nothing of sf, and Sample Factory's venv has an `sf_examples` package of its own) with Sample
Factory's registry, adds `--env_agents` as Sample Factory's IsaacGym and Brax examples do, and runs Sample Factory's
own `run_rl` on the command line given, so both frameworks step the same copies with the same flags.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

CLASSES = Path(__file__).resolve().parents[2] / "sf_examples" / "tensor_envs" / "torch_classic.py"


def _load_classes() -> dict:
    spec = importlib.util.spec_from_file_location("tensor_env_classes", CLASSES)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {"tensor_cartpole": module.TensorCartPole, "tensor_pendulum": module.TensorPendulum}


ENV_CLASSES = _load_classes()


def make_env(full_env_name: str, cfg, env_config=None, render_mode=None):
    seed = None if cfg.seed is None else cfg.seed * 100_003 + (env_config.env_id if env_config else 0)
    return ENV_CLASSES[full_env_name](cfg.env_agents, "cpu", seed)


def main() -> int:
    from sample_factory.cfg.arguments import parse_full_cfg, parse_sf_args
    from sample_factory.envs.env_utils import register_env
    from sample_factory.train import run_rl

    for name in ENV_CLASSES:
        register_env(name, make_env)
    parser, _ = parse_sf_args(argv=sys.argv[1:])
    parser.add_argument("--env_agents", default=1024, type=int, help="copies of the batched env")
    return run_rl(parse_full_cfg(parser, argv=sys.argv[1:]))


if __name__ == "__main__":
    sys.exit(main())
