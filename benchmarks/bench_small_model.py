"""CPU time of a small model's hot operations: the inference step of the CartPole suite's policy (torch against the
numba kernel of `sf.model.mlp_kernel`) and ELU / tanh over typical activations (torch against `sf.model.activations`).

    python benchmarks/bench_small_model.py [--repeats 2000]
    pytest benchmarks/bench_small_model.py --benchmark-enable

The inference step is the whole `InferenceWorker.flush` for one request of 16 observations (gather, normalize,
forward, sample, write back), as a rollout worker's process runs it. The activations are a 1,024 x 64 MLP layer
(the learner's CartPole minibatch) and the Doom encoder's first conv output at an inference batch of 8
(8 x 32 x 17 x 31); the learner's 1,024-sample version of the latter is timed once per repeat.
"""

from __future__ import annotations

import argparse
import time
import types
from collections.abc import Callable

import numpy as np
import pytest
import torch
from torch import nn

from sf.envs.spaces import ActionSpec
from sf.model import create_actor_critic
from sf.model.activations import Activation
from sf.runtime.buffers import TrajectoryBuffers, make_layout
from sf.runtime.inference_worker import InferenceWorker
from sf.runtime.policy_store import LocalPolicyStore

torch.set_num_threads(1)

OBS_SPEC = {"obs": ((4,), np.dtype(np.float32))}
REQUEST = 16
CFG = dict(
    encoder_mlp_layers=[64, 64],
    encoder_conv_architecture="convnet_simple",
    encoder_conv_mlp_layers=[512],
    nonlinearity="tanh",
    use_rnn=False,
    rnn_type="gru",
    rnn_size=64,
    rnn_num_layers=1,
    decoder_mlp_layers=[],
    actor_critic_share_weights=True,
    adaptive_stddev=False,
    initial_stddev=1.0,
    continuous_tanh_scale=0.0,
    policy_initialization="orthogonal",
    policy_init_gain=1.0,
    init_all_layers=False,
    normalize_input=True,
    normalize_input_keys=None,
    obs_subtract_mean=0.0,
    obs_scale=1.0,
    normalize_returns=True,
    precision="fp32",
    rollout=32,
    num_workers=2,
    num_envs_per_worker=16,
    batch_size=1024,
    num_batches_per_epoch=1,
    num_batches_to_accumulate=2,
    async_rl=True,
)


class _Loop:
    def send(self, *message) -> None:
        pass


def inference_step(kernel: bool) -> Callable[[], None]:
    """One flush of an inference worker with one pending request of REQUEST observations."""
    cfg = types.SimpleNamespace(**CFG, mlp_inference_kernel=kernel)
    model = create_actor_critic(OBS_SPEC, ActionSpec((2,), 0), cfg)
    buffers = TrajectoryBuffers(make_layout(cfg, OBS_SPEC, model.action_spec, 0), shared=False)
    worker = InferenceWorker(cfg, 0, 0, buffers, model, LocalPolicyStore(), "cpu")
    worker.loop = _Loop()
    worker.on_start()
    slots, steps = list(range(REQUEST)), [3] * REQUEST

    def step() -> None:
        worker.requests.append((0, 0, slots, steps))
        worker.flush()

    return step


def activation(kind: str, fast: bool, shape: tuple[int, ...]) -> Callable[[], None]:
    x = torch.randn(*shape)
    if len(shape) == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    fn = Activation(kind, inplace=True) if fast else (nn.ELU(inplace=True) if kind == "elu" else torch.tanh_)
    return lambda: fn(x)  # in place, again and again: ELU's values stay above -1, tanh's shrink slowly towards 0


CASES: dict[str, Callable[[], Callable[[], None]]] = {
    "inference_torch": lambda: inference_step(False),
    "inference_kernel": lambda: inference_step(True),
    "tanh_1024x64_torch": lambda: activation("tanh", False, (1024, 64)),
    "tanh_1024x64_kernel": lambda: activation("tanh", True, (1024, 64)),
    "elu_8x32x17x31_torch": lambda: activation("elu", False, (8, 32, 17, 31)),
    "elu_8x32x17x31_kernel": lambda: activation("elu", True, (8, 32, 17, 31)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_small_model(benchmark, name: str):
    step = CASES[name]()
    step()  # numba compiles or loads its cache here
    benchmark(step)


def _best_us(step: Callable[[], None], repeats: int) -> float:
    step()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeats):
            step()
        best = min(best, (time.perf_counter() - start) / repeats)
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=2000)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), best of 5 x {args.repeats} calls")
    for name in ("inference", "tanh_1024x64", "elu_8x32x17x31"):
        t_torch = _best_us(CASES[f"{name}_torch"](), args.repeats)
        t_kernel = _best_us(CASES[f"{name}_kernel"](), args.repeats)
        print(
            f"{name:16s}: torch {t_torch:8.1f} us, kernel {t_kernel:8.1f} us, torch/kernel {t_torch / t_kernel:5.1f}x"
        )
    big = (1024, 32, 17, 31)
    t_torch = _best_us(activation("elu", False, big), 3) / 1e3
    t_kernel = _best_us(activation("elu", True, big), 3) / 1e3
    print(
        f"elu_1024x32x17x31: torch {t_torch:8.1f} ms, kernel {t_kernel:8.1f} ms, "
        f"torch/kernel {t_torch / t_kernel:5.1f}x"
    )


if __name__ == "__main__":
    main()
