"""The type names a model or env written for Sample Factory annotates with (`sample_factory.utils.typing`)."""

from __future__ import annotations

import argparse
from typing import Any, Union

from gymnasium import spaces

Config = Union[argparse.Namespace, Any]  # the resolved flags; tests and libraries may pass any namespace
ObsSpace = spaces.Space
ActionSpace = spaces.Space
PolicyID = int
