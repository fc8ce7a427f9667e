"""ELU and tanh as numba kernels on the CPU, in place where the layer allows it.

Why: on a 2-core AVX2 EPYC torch's CPU kernels take 2.5-3.4 ns an element for ELU and tanh (168 us and 221 us
over a 1,024 x 64 activation, 82 ms for ELU over the Doom encoder's first 1,024 x 32 x 17 x 31 conv output)
where a multiply takes 0.2 ns. The kernels here evaluate the same functions as vectorized polynomials: ELU through
Cephes' single-precision exp (within 7e-8 of the exact value, as torch's), tanh through the rational approximation
Eigen and XLA use for float32 (within 3e-7), at 0.35-0.8 ns an element (`docs/performance.md`, section 16). The
backward passes stay torch's and work from the output, which in place is all that is kept.

Used for dense float32 CPU tensors of at least `MIN_ELEMENTS` elements; anything else (CUDA, bfloat16 under
autocast, small tensors whose call overhead would dominate) goes to torch's own functions, as does a forward pass
being traced (an ONNX export), which records torch's operators and would not see a kernel's, and a module a user
compiles with TorchScript.
"""

from __future__ import annotations

import numba
import numpy as np
import torch
from torch import nn

MIN_ELEMENTS = 4096
_FAST = {"contract", "reassoc", "nsz", "arcp"}  # no assumption about NaN or infinity
# error_model="numpy": a division needs no Python zero check, whose branch would stop the loop's vectorization
_KERNEL = dict(cache=True, fastmath=_FAST, error_model="numpy")


@numba.njit(inline="always", **_KERNEL)
def _exp(x: np.float32) -> np.float32:
    """Cephes' expf: x = n ln 2 + r with |r| <= ln 2 / 2, e^r by a degree-6 polynomial, 2^n through the exponent
    bits."""
    x = min(max(x, np.float32(-87.3)), np.float32(88.7))
    n = np.floor(x * np.float32(1.44269504088896341) + np.float32(0.5))
    r = x - n * np.float32(0.693359375)
    r = r + n * np.float32(2.12194440e-4)
    p = np.float32(1.9875691500e-4)
    p = p * r + np.float32(1.3981999507e-3)
    p = p * r + np.float32(8.3334519073e-3)
    p = p * r + np.float32(4.1665795894e-2)
    p = p * r + np.float32(1.6666665459e-1)
    p = p * r + np.float32(5.0000001201e-1)
    y = p * (r * r) + r + np.float32(1.0)
    return y * np.int32((np.int32(n) + np.int32(127)) << np.int32(23)).view(np.float32)


@numba.njit(inline="always", **_KERNEL)
def fast_tanh(x: np.float32) -> np.float32:
    """tanh as Eigen's (and XLA's) float32 rational function on [-7.905, 7.905], saturating beyond."""
    c = np.float32(7.90531110763549805)
    x = min(max(x, -c), c)
    x2 = x * x
    p = np.float32(-2.76076847742355e-16)
    p = p * x2 + np.float32(2.00018790482477e-13)
    p = p * x2 + np.float32(-8.60467152213735e-11)
    p = p * x2 + np.float32(5.12229709037114e-08)
    p = p * x2 + np.float32(1.48572235717979e-05)
    p = p * x2 + np.float32(6.37261928875436e-04)
    p = p * x2 + np.float32(4.89352455891786e-03)
    q = np.float32(1.19825839466702e-06)
    q = q * x2 + np.float32(1.18534705686654e-04)
    q = q * x2 + np.float32(2.26843463243900e-03)
    q = q * x2 + np.float32(4.89352518554385e-03)
    return p * x / q


@numba.njit(inline="always", **_KERNEL)
def fast_elu(x: np.float32) -> np.float32:
    """ELU with alpha 1: x above zero, e^x - 1 at or below (a Taylor polynomial near zero, where e^x - 1 would cancel
    to nothing)."""
    near = x * (np.float32(1.0) + x * (np.float32(0.5) + x * (np.float32(1 / 6) + x * np.float32(1 / 24))))
    below = _exp(min(x, np.float32(0.0))) - np.float32(1.0)
    return x if x > 0 else (near if x > np.float32(-0.03125) else below)


@numba.njit(**_KERNEL)
def _tanh_inplace(a: np.ndarray) -> None:
    for i in range(a.size):
        a[i] = fast_tanh(a[i])


@numba.njit(**_KERNEL)
def _elu_inplace(a: np.ndarray) -> None:
    for i in range(a.size):
        a[i] = fast_elu(a[i])


@numba.njit(**_KERNEL)
def _elu_backward(grad: np.ndarray, out: np.ndarray, grad_in: np.ndarray) -> None:
    """d ELU / dx from the output: 1 above zero, e^x = out + 1 at or below."""
    for i in range(grad.size):
        g = grad[i]
        y = out[i]
        grad_in[i] = g if y > 0 else g * (y + np.float32(1.0))


_KERNELS = {"tanh": _tanh_inplace, "elu": _elu_inplace}


def _flat(x: torch.Tensor) -> np.ndarray:
    return torch.as_strided(x.detach(), (x.numel(),), (1,)).numpy()


def _backward(kind: str, grad: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """torch's tanh backward is already cheap; its ELU backward takes 3 ns an element here, the kernel under 1."""
    if kind == "tanh" or not (_dense_float32_cpu(grad) and grad.stride() == out.stride()):
        if kind == "tanh":
            return torch.ops.aten.tanh_backward(grad, out)
        return torch.ops.aten.elu_backward(grad, 1.0, 1.0, 1.0, True, out)  # is_result: from the output
    grad_in = torch.empty_like(out)
    _elu_backward(_flat(grad), _flat(out), _flat(grad_in))
    return grad_in


def _dense_float32_cpu(x: torch.Tensor) -> bool:
    """The kernels can run over x's memory as one flat array."""
    if x.device.type != "cpu" or x.dtype != torch.float32 or x.numel() < MIN_ELEMENTS:
        return False
    return x.is_contiguous() or (x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last))


def _apply_inplace(kind: str, x: torch.Tensor) -> None:
    _KERNELS[kind](_flat(x))


class _InplaceActivation(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, kind: str) -> torch.Tensor:
        _apply_inplace(kind, x)
        ctx.mark_dirty(x)
        ctx.save_for_backward(x)
        ctx.kind = kind
        return x

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        (out,) = ctx.saved_tensors
        return _backward(ctx.kind, grad, out), None


class Activation(nn.Module):
    """`kind` ("elu" or "tanh") through the kernels where they apply, torch's function elsewhere. With `inplace` the
    input is overwritten: only for inputs nothing else reads (a fresh layer output)."""

    def __init__(self, kind: str, inplace: bool = False):
        super().__init__()
        if kind not in _KERNELS:
            raise ValueError(f"no kernel activation {kind!r}; one of {', '.join(_KERNELS)}")
        self.kind = kind
        self.inplace = inplace

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.jit.is_scripting():  # TorchScript (a model a user scripts) compiles torch's function only
            return self._torch(x)
        return self._kernel_or_torch(x)

    def _torch(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) if self.kind == "tanh" else nn.functional.elu(x, inplace=self.inplace)

    @torch.jit.unused
    def _kernel_or_torch(self, x: torch.Tensor) -> torch.Tensor:
        if torch.jit.is_tracing() or not _dense_float32_cpu(x):  # a traced graph (ONNX export) records torch's op
            return self._torch(x)
        if not self.inplace:
            x = x.clone(memory_format=torch.preserve_format)
        if torch.is_grad_enabled() and x.requires_grad:
            return _InplaceActivation.apply(x, self.kind)
        _apply_inplace(self.kind, x)
        return x

    def extra_repr(self) -> str:
        return f"{self.kind}, inplace={self.inplace}"
