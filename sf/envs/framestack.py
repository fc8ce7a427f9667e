"""Frame stacking on sf's observation dict: the policy sees the last `k` observations of every key.

As gymnasium's FrameStack (what Sample Factory's Atari setup uses): oldest first, and after a reset the
first observation fills the whole stack. sf stacks along the first axis, which is the channel axis of a
(C, H, W) image and the feature axis of a vector, so the encoders take a stacked observation unchanged.
"""

from __future__ import annotations

import numpy as np

from sf.envs.spaces import ObsSpec


def stacked_spec(spec: ObsSpec, k: int) -> ObsSpec:
    return {key: ((shape[0] * k, *shape[1:]), dtype) for key, (shape, dtype) in spec.items()}


class FrameStack:
    """One preallocated array per key; a step shifts it by one frame and writes the new frame at the end."""

    def __init__(self, spec: ObsSpec, k: int):
        self.k = k
        self.frames = {key: np.zeros((shape[0] * k, *shape[1:]), dtype) for key, (shape, dtype) in spec.items()}
        self.frame_len = {key: shape[0] for key, (shape, _) in spec.items()}

    def reset(self, obs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        for key, frame in obs.items():
            n = self.frame_len[key]
            stack = self.frames[key]
            for i in range(self.k):
                stack[i * n : (i + 1) * n] = frame
        return self.frames

    def step(self, obs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        for key, frame in obs.items():
            n, stack = self.frame_len[key], self.frames[key]
            stack[:-n] = stack[n:]
            stack[-n:] = frame
        return self.frames
