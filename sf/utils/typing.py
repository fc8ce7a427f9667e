"""The type names a model or env written for Sample Factory annotates with (`sample_factory.utils.typing`)."""

from __future__ import annotations

from typing import Any

from gymnasium import spaces

Config = Any  # the resolved flags: an argparse.Namespace from the parser, any namespace in tests and libraries
ObsSpace = spaces.Space
ActionSpace = spaces.Space
PolicyID = int
