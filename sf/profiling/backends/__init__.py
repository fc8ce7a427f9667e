"""Profiler backends by name: every one starts, stops at a learner-iteration boundary, and names its outputs."""

from __future__ import annotations

from sf.profiling.backends.base import Backend, BackendFactory, get_backend, register_backend

__all__ = ["Backend", "BackendFactory", "get_backend", "register_backend"]
