"""How gymnasium spaces map onto the flat tensors that travel through sf's buffers.

Observations become a dict of arrays (one entry per leaf of the space); actions become one flat
float32 vector per agent: the categorical indices first, then the Gaussian components.
The converters pick their conversion functions once, at construction, so that the per-step call
does no type dispatch; a plain Box or a single Discrete/Box action converts with one function call.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces

ObsSpec = dict[str, tuple[tuple[int, ...], np.dtype]]

_SUPPORTED_OBS = "Box, Discrete, MultiBinary, and Dict/Tuple of these"
_SUPPORTED_ACTIONS = "Discrete, MultiDiscrete, float Box, and a flat Tuple of these"


class UnsupportedSpaceError(ValueError):
    """A gymnasium space sf cannot lay out in its buffers."""


@dataclass(frozen=True)
class ActionSpec:
    """Layout of the flat action vector: `discrete_sizes` categorical entries, then `continuous_dim` floats."""

    discrete_sizes: tuple[int, ...]
    continuous_dim: int

    @property
    def flat_dim(self) -> int:
        return len(self.discrete_sizes) + self.continuous_dim

    @property
    def num_logits(self) -> int:
        return sum(self.discrete_sizes) + self.continuous_dim


@dataclass(frozen=True)
class EnvInfo:
    """What a probe of the env tells every placement (and, with `--backend=ray`, every node): its spaces, the reward
    scale and the frameskip that env frames are counted with."""

    obs_spec: ObsSpec
    action_spec: ActionSpec
    reward_scale: float
    frameskip: int
    num_agents: int = 1  # agents per env: each steps, learns and counts its frames as one env would
    is_multiagent: bool = False  # the env has Sample Factory's multi-agent API (`sf.envs.multi_agent`)
    reward_shaping: dict | None = None  # the env's default scheme (Sample Factory's `RewardShapingInterface`)


def _unsupported(space: Any, role: str, where: str, supported: str) -> UnsupportedSpaceError:
    at = f" at {where!r}" if where else ""
    return UnsupportedSpaceError(
        f"{type(space).__name__} {role} space{at} is not supported ({space!r}); supported: {supported}"
    )


# observations ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _ObsLeaf:
    key: str
    path: tuple[Any, ...]  # indices into the raw (possibly nested) observation
    shape: tuple[int, ...]
    dtype: np.dtype
    convert: Callable[[Any], np.ndarray]


def _is_hwc_image(space: spaces.Box) -> bool:
    h, w, c = space.shape if len(space.shape) == 3 else (0, 0, 0)
    return space.dtype == np.uint8 and 1 <= c <= 4 and h > c and w > c


def _box_leaf(space: spaces.Box, key: str, path: tuple) -> _ObsLeaf:
    if _is_hwc_image(space):
        h, w, c = space.shape
        return _ObsLeaf(key, path, (c, h, w), np.dtype(np.uint8), lambda x: np.asarray(x, np.uint8).transpose(2, 0, 1))
    if space.dtype == np.uint8:  # stays compact in shared memory; the encoder casts
        return _ObsLeaf(key, path, space.shape, np.dtype(np.uint8), lambda x: np.asarray(x, np.uint8))
    if space.shape == ():  # encoders expect at least one feature dimension
        return _ObsLeaf(key, path, (1,), np.dtype(np.float32), lambda x: np.asarray(x, np.float32).reshape(1))
    return _ObsLeaf(key, path, space.shape, np.dtype(np.float32), lambda x: np.asarray(x, np.float32))


def _discrete_leaf(space: spaces.Discrete, key: str, path: tuple) -> _ObsLeaf:
    eye, start = np.eye(int(space.n), dtype=np.float32), int(space.start)
    return _ObsLeaf(key, path, (int(space.n),), np.dtype(np.float32), lambda x: eye[int(x) - start].copy())


def _obs_leaves(space: Any, key: str, path: tuple) -> list[_ObsLeaf]:
    if isinstance(space, spaces.Box):
        return [_box_leaf(space, key or "obs", path)]
    if isinstance(space, spaces.Discrete):
        return [_discrete_leaf(space, key or "obs", path)]
    if isinstance(space, spaces.MultiBinary):
        return [_ObsLeaf(key or "obs", path, space.shape, np.dtype(np.float32), lambda x: np.asarray(x, np.float32))]
    if isinstance(space, (spaces.Dict, spaces.Tuple)) and len(space.spaces) > 0:
        items = space.spaces.items() if isinstance(space, spaces.Dict) else enumerate(space.spaces)
        return [
            leaf
            for name, sub in items
            for leaf in _obs_leaves(sub, f"{key}.{name}" if key else str(name), (*path, name))
        ]
    raise _unsupported(space, "observation", key, _SUPPORTED_OBS)


def obs_spec_from_space(space: Any) -> ObsSpec:
    """`{key: (shape, dtype)}` of the dict `ObsConverter` produces for this space."""
    return ObsConverter(space).spec


class ObsConverter:
    """Turns a raw gymnasium observation into sf's dict of arrays (returned arrays may be views)."""

    def __init__(self, space: Any):
        leaves = _obs_leaves(space, "", ())
        self.spec: ObsSpec = {leaf.key: (leaf.shape, leaf.dtype) for leaf in leaves}
        if len(leaves) == 1 and not leaves[0].path:
            key, fn = leaves[0].key, leaves[0].convert
            self.convert: Callable[[Any], dict[str, np.ndarray]] = lambda obs: {key: fn(obs)}
        else:
            self._leaves = [(leaf.key, leaf.path, leaf.convert) for leaf in leaves]
            self.convert = self._convert_nested

    def _convert_nested(self, obs: Any) -> dict[str, np.ndarray]:
        out = {}
        for key, path, fn in self._leaves:
            value = obs
            for step in path:
                value = value[step]
            out[key] = fn(value)
        return out

    def __call__(self, obs: Any) -> dict[str, np.ndarray]:
        return self.convert(obs)


# actions ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _ActionPart:
    discrete_sizes: tuple[int, ...]
    continuous_dim: int
    convert: Callable[[np.ndarray], Any]  # from this part's own slice of the flat vector


def _float32_bounds_inside(space: spaces.Box) -> tuple[np.ndarray, np.ndarray]:
    """The Box bounds as float32, rounded inward so a clipped action never leaves the original bounds."""
    low64 = np.broadcast_to(space.low, space.shape).astype(np.float64).ravel()
    high64 = np.broadcast_to(space.high, space.shape).astype(np.float64).ravel()
    low, high = low64.astype(np.float32), high64.astype(np.float32)
    low = np.where(low < low64, np.nextafter(low, np.float32(np.inf)), low).astype(np.float32)
    high = np.where(high > high64, np.nextafter(high, np.float32(-np.inf)), high).astype(np.float32)
    return low, high


def _box_part(space: spaces.Box) -> _ActionPart:
    shape, dim = space.shape, int(np.prod(space.shape, dtype=np.int64))
    low, high = _float32_bounds_inside(space)
    bounded = bool(np.isfinite(low).any() or np.isfinite(high).any())

    def clip(a: np.ndarray) -> np.ndarray:
        return a.clip(low, high) if bounded else a.astype(np.float32)  # a copy: the env must not alias sf's buffers

    def clip_and_shape(a: np.ndarray) -> np.ndarray:
        return clip(a).reshape(shape)

    convert = clip if shape == (dim,) else clip_and_shape
    return _ActionPart((), dim, convert)


def _action_part(space: Any, where: str) -> _ActionPart:
    if isinstance(space, spaces.Discrete):
        start = int(space.start)
        convert = (lambda a: int(a[0])) if start == 0 else (lambda a: int(a[0]) + start)
        return _ActionPart((int(space.n),), 0, convert)
    if isinstance(space, spaces.MultiDiscrete):
        shape, start = space.nvec.shape, np.asarray(space.start, dtype=np.int64)
        sizes = tuple(int(n) for n in space.nvec.ravel())
        return _ActionPart(sizes, 0, lambda a: a.astype(np.int64).reshape(shape) + start)
    if isinstance(space, spaces.Box) and np.issubdtype(space.dtype, np.floating):
        return _box_part(space)
    raise _unsupported(space, "action", where, _SUPPORTED_ACTIONS)


def action_spec_from_space(space: Any) -> ActionSpec:
    return ActionConverter(space).spec


class ActionConverter:
    """Turns sf's flat float32 action vector into the action the env expects."""

    def __init__(self, space: Any):
        if not isinstance(space, spaces.Tuple):
            part = _action_part(space, "")
            self.spec = ActionSpec(part.discrete_sizes, part.continuous_dim)
            self.convert: Callable[[np.ndarray], Any] = part.convert
            return
        parts = [_action_part(sub, str(i)) for i, sub in enumerate(space.spaces)]
        if not parts:
            raise _unsupported(space, "action", "", _SUPPORTED_ACTIONS)
        discrete_sizes = tuple(size for part in parts for size in part.discrete_sizes)
        self.spec = ActionSpec(discrete_sizes, sum(part.continuous_dim for part in parts))
        self._slices: list[tuple[Callable[[np.ndarray], Any], int, int]] = []
        discrete_at, continuous_at = 0, len(discrete_sizes)
        for part in parts:
            if part.discrete_sizes:
                start, discrete_at = discrete_at, discrete_at + len(part.discrete_sizes)
            else:
                start, continuous_at = continuous_at, continuous_at + part.continuous_dim
            self._slices.append((part.convert, start, start + len(part.discrete_sizes) + part.continuous_dim))
        self.convert = self._convert_tuple

    def _convert_tuple(self, flat: np.ndarray) -> tuple:
        return tuple(fn(flat[start:stop]) for fn, start, stop in self._slices)

    def __call__(self, flat: np.ndarray) -> Any:
        return self.convert(flat)


# the spaces a model is built from -------------------------------------------------------------------
def obs_space_from_spec(spec: ObsSpec) -> spaces.Dict:
    """The observations as the model receives them, as a gymnasium Dict (Sample Factory hands its model factories
    a Dict too): one Box per key, in sf's layout (images channels first, Discrete one-hot), with the bounds of the
    dtype (uint8: 0-255, float32: unbounded), in `spec` order."""
    return spaces.Dict(
        OrderedDict(  # a plain dict would have its keys sorted
            (key, spaces.Box(0, 255, shape, np.uint8))
            if np.dtype(dtype) == np.uint8
            else (key, spaces.Box(-np.inf, np.inf, shape, np.float32))
            for key, (shape, dtype) in spec.items()
        )
    )


def obs_spec_of_space(space: spaces.Dict) -> ObsSpec:
    """The inverse of `obs_space_from_spec`: each key's shape and dtype, in the Dict's order."""
    return {key: (tuple(sub.shape), np.dtype(sub.dtype)) for key, sub in space.spaces.items()}


def action_space_from_spec(spec: ActionSpec) -> Any:
    """An action space whose flat layout is `spec` (`action_spec_from_space` gives `spec` back): a Discrete, a
    MultiDiscrete, an unbounded Box, or a Tuple of Discretes and a Box for a mixed action."""
    box = spaces.Box(-np.inf, np.inf, (spec.continuous_dim,), np.float32)
    sizes = spec.discrete_sizes
    if not spec.continuous_dim:
        return spaces.Discrete(sizes[0]) if len(sizes) == 1 else spaces.MultiDiscrete(list(sizes))
    if not sizes:
        return box
    return spaces.Tuple([*(spaces.Discrete(n) for n in sizes), box])
