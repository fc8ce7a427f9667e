"""The numba kernels are compiled before a run's clock starts: after `compile_kernels`, the components' own calls at
their real shapes (a learner batch's GAE and V-trace, a training forward and backward, an image batch's
normalization) find every kernel ready, with nothing left to compile or load; and the first compile in a process says
so in one line, a kernel already compiled saying nothing."""

from __future__ import annotations

import logging

import numba
import numpy as np
import pytest
import torch
from numba.core import event
from numba.core.registry import CPUDispatcher

from sf.algo import discounted_scan, gae
from sf.algo.vtrace import compute_vtrace
from sf.cfg.arguments import default_cfg
from sf.envs.spaces import ActionSpec, EnvInfo
from sf.model import activations, mlp_kernel, pixel_kernels
from sf.runner.build import build_buffers, build_model
from sf.runtime.kernel_compile import COMPILE_EVENT, FirstCompileLine, compile_kernels, compiling_line

KERNEL_MODULES = (gae, discounted_scan, activations, pixel_kernels, mlp_kernel)


def _signatures() -> dict[str, int]:
    return {
        f"{module.__name__}.{name}": len(value.signatures)
        for module in KERNEL_MODULES
        for name, value in vars(module).items()
        if isinstance(value, CPUDispatcher)
    }


@pytest.mark.parametrize("nonlinearity", ["tanh", "elu"])
def test_a_learner_batch_finds_every_kernel_compiled(nonlinearity):
    cfg = default_cfg(env="CartPole-v1", nonlinearity=nonlinearity, encoder_mlp_layers=[64, 64])
    info = EnvInfo({"obs": ((4,), np.dtype(np.float32))}, ActionSpec((), 2), 1.0, 1)
    model = build_model(cfg, info, "cpu")
    compile_kernels(cfg, model, build_buffers(cfg, info, model.rnn_state_size, shared=False), "cpu")
    before = _signatures()

    n, t = 16, 32  # the learner's batch of trajectories
    rewards, dones, values = torch.rand(n, t), (torch.rand(n, t) < 0.05).float(), torch.rand(n, t + 1)
    gae.compute_gae(rewards, dones, values, 0.99, 0.95, torch.ones(n, t + 1, dtype=torch.bool))
    compute_vtrace(rewards, dones, values, torch.zeros(n, t), 0.99, 1.0, 1.0)
    out = model.forward_head(model.normalize_obs({"obs": torch.randn(n * t, 4)}))
    out.sum().backward()
    assert out.numel() >= activations.MIN_ELEMENTS  # the activations ran through the kernels
    assert _signatures() == before


def test_an_image_batch_finds_the_pixel_kernels_compiled():
    cfg = default_cfg(env="CartPole-v1", normalize_input=True)
    shape = (3, 36, 64)
    info = EnvInfo({"obs": (shape, np.dtype(np.uint8))}, ActionSpec((), 3), 1.0, 1)
    model = build_model(cfg, info, "cpu")
    compile_kernels(cfg, model, build_buffers(cfg, info, model.rnn_state_size, shared=False), "cpu")
    before = _signatures()
    batch = {"obs": torch.randint(0, 256, (8, *shape), dtype=torch.uint8)}
    model.normalize_obs(batch, update=True)
    assert _signatures() == before


def test_the_first_compile_says_so_once_and_a_compiled_kernel_nothing(caplog, monkeypatch):
    from sf.runtime import kernel_compile

    if kernel_compile._listener is not None:  # the process's own, installed by a run earlier in this process
        monkeypatch.setattr(kernel_compile._listener, "said", True)
    listener = FirstCompileLine()
    compiled = numba.njit(lambda x: x + 1)
    compiled(1)
    with event.install_listener(COMPILE_EVENT, listener), caplog.at_level(logging.INFO, logger="sf"):
        compiled(2)  # compiled before: no event
        assert caplog.messages == []
        numba.njit(lambda x: x * 2)(3)
        numba.njit(lambda x: x * 3)(4)
    assert caplog.messages == [compiling_line()]
    assert "numba caches them in" in compiling_line()


def test_the_line_names_numba_cache_dir_when_set(monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", "/tmp/numba-cache")
    assert "$NUMBA_CACHE_DIR (/tmp/numba-cache)" in compiling_line()
