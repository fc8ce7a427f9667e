"""The fused uint8 image path of ObsNormalizer (numba kernels) against the plain torch computation it replaces."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch

from sf.algo.running_mean_std import RunningMeanStd
from sf.model.obs_normalizer import ObsNormalizer
from sf.model.pixel_kernels import uint8_moments

SPEC = {"image": ((3, 6, 10), np.dtype(np.uint8)), "vec": ((4,), np.dtype(np.float32))}


def normalizer(normalize_input: bool = True, subtract_mean: float = 10.0, scale: float = 255.0) -> ObsNormalizer:
    cfg = types.SimpleNamespace(
        obs_subtract_mean=subtract_mean, obs_scale=scale, normalize_input=normalize_input, normalize_input_keys=None
    )
    return ObsNormalizer(SPEC, cfg)


def images(n: int, seed: int) -> torch.Tensor:
    return torch.randint(
        0, 256, (n, *SPEC["image"][0]), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed)
    )


def reference(x: torch.Tensor, subtract_mean: float, scale: float, stats: RunningMeanStd | None) -> torch.Tensor:
    y = (x.double() - subtract_mean) / scale
    if stats is None:
        return y.float()
    return ((y - stats.mean.double()) / torch.sqrt(stats.var.double() + stats.epsilon)).clamp(-5, 5).float()


def test_moments_match_var_mean():
    x = images(33, seed=1)
    mean, var = uint8_moments(x)
    ref_var, ref_mean = torch.var_mean(x.double(), dim=0, correction=0)
    torch.testing.assert_close(mean.double(), ref_mean)
    torch.testing.assert_close(var.double(), ref_var)


def test_update_matches_torch_statistics():
    fast = normalizer()
    stats = RunningMeanStd(SPEC["image"][0])
    for seed in range(3):
        x = images(20 + seed, seed)
        fast.update({"image": x, "vec": torch.randn(20 + seed, 4)})
        stats.update((x.float() - 10.0) / 255.0)
    got = fast.stats["image"]
    assert got.count.item() == stats.count.item() == 63
    torch.testing.assert_close(got.mean, stats.mean, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got.var, stats.var, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("normalize_input", [True, False])
def test_fused_normalize_matches_reference_and_is_channels_last(normalize_input):
    norm = normalizer(normalize_input)
    if normalize_input:
        norm.update({"image": images(40, seed=2), "vec": torch.randn(40, 4)})
    x = images(5, seed=3)
    out = norm({"image": x, "vec": torch.randn(5, 4)})["image"]
    stats = norm.stats["image"] if normalize_input else None
    assert out.dtype == torch.float32 and out.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(out, reference(x, 10.0, 255.0, stats), rtol=1e-5, atol=1e-5)
    if normalize_input:
        assert float(out.abs().max()) <= 5.0


def test_strided_input_and_untouched_source():
    norm = normalizer()
    norm.update({"image": images(16, seed=4), "vec": torch.randn(16, 4)})
    batch = images(8, seed=5)
    before = batch.clone()
    strided = batch[::2]  # not contiguous
    out = norm({"image": strided, "vec": torch.randn(4, 4)})["image"]
    torch.testing.assert_close(out, reference(strided, 10.0, 255.0, norm.stats["image"]), rtol=1e-5, atol=1e-5)
    assert torch.equal(batch, before)


def test_cached_affine_follows_updates_and_loaded_weights():
    norm = normalizer()
    x = images(4, seed=6)
    first = norm({"image": x, "vec": torch.randn(4, 4)})["image"]
    norm.update({"image": images(64, seed=7), "vec": torch.randn(64, 4)})
    after_update = norm({"image": x, "vec": torch.randn(4, 4)})["image"]
    assert not torch.allclose(first, after_update)
    torch.testing.assert_close(after_update, reference(x, 10.0, 255.0, norm.stats["image"]), rtol=1e-5, atol=1e-5)

    other = normalizer()
    other({"image": x, "vec": torch.randn(4, 4)})  # fills other's cache with its initial statistics
    other.load_state_dict(norm.state_dict())
    torch.testing.assert_close(other({"image": x, "vec": torch.randn(4, 4)})["image"], after_update)
