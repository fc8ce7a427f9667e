"""The numba ELU and tanh against torch's: values within float32 rounding over the whole range, the same gradients
in place and not, in channels-last memory, and torch's own functions where the kernels do not apply."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from sf.model.activations import MIN_ELEMENTS, Activation

torch.set_num_threads(1)

REFERENCE = {"elu": nn.functional.elu, "tanh": torch.tanh}
TOLERANCE = {"elu": 1e-7, "tanh": 3e-7}  # max abs error of the approximations (torch's own: 6e-8 and 3e-8)


@pytest.mark.parametrize("kind", ["elu", "tanh"])
def test_values_over_the_whole_range(kind):
    x = torch.cat([torch.linspace(-100.0, 100.0, 400_001), torch.linspace(-1e-6, 1e-6, 1001)])
    exact = REFERENCE[kind](x.double())
    with torch.no_grad():
        got = Activation(kind)(x)
    assert (got.double() - exact).abs().max() <= TOLERANCE[kind]
    assert torch.equal(torch.sign(got[x != 0]), torch.sign(exact[x != 0]).float())


@pytest.mark.parametrize("kind", ["elu", "tanh"])
@pytest.mark.parametrize("inplace", [True, False])
def test_gradients_through_a_conv_layer_match_torch(kind, inplace):
    torch.manual_seed(0)
    conv = nn.Conv2d(3, 8, 3).to(memory_format=torch.channels_last)
    x = torch.randn(16, 3, 12, 12).contiguous(memory_format=torch.channels_last) * 2
    reference_grads, grads = [], []
    for act, store in ((REFERENCE[kind], reference_grads), (Activation(kind, inplace), grads)):
        conv.zero_grad()
        y = act(conv(x))
        (y * torch.linspace(-1, 1, y.numel()).view_as(y)).sum().backward()
        store += [conv.weight.grad.clone(), conv.bias.grad.clone(), y.detach()]
    assert grads[2].is_contiguous(memory_format=torch.channels_last)
    for got, expected in zip(grads, reference_grads):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_out_of_place_leaves_the_input_and_torch_takes_what_the_kernels_do_not_cover():
    x = torch.randn(64, 128)
    before = x.clone()
    y = Activation("elu")(x)
    assert torch.equal(x, before) and not torch.equal(y, x)
    Activation("elu", inplace=True)(x)
    torch.testing.assert_close(x, y)

    small = torch.randn(MIN_ELEMENTS - 1)
    assert torch.equal(Activation("tanh")(small), torch.tanh(small))
    half = torch.randn(64, 128, dtype=torch.bfloat16)
    assert torch.equal(Activation("elu")(half), nn.functional.elu(half))
    strided = torch.randn(128, 128)[:, ::2]
    assert torch.equal(Activation("tanh")(strided), torch.tanh(strided))
