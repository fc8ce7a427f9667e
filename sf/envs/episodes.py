"""Which episodes are reported, and what an episode reports besides its return and length.

With `--use_record_episode_statistics` an episode counts when the env says one ended (gymnasium's
`RecordEpisodeStatistics` puts `info["episode"]` on that step), with the env's return and length. Atari's stack ends
an episode for the learner at every lost life and clips its rewards; its own statistics see whole games and scores.

On the step that ends an episode an env may also put, as Sample Factory reads them:
- `info["true_objective"]`: the number the user really optimizes (a score beside a shaped reward); the runner averages
  it like the return, and without it the return stands in;
- `info["episode_extra_stats"]`: a dict of numbers or flags (nested dicts are flattened to their leaf keys; a list or
  array counts each element as one sample), averaged per policy over the last `--stats_avg` episodes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from numbers import Real
from typing import Any

import numpy as np

log = logging.getLogger("sf")

NO_INFO: dict = {}

EpisodeRecord = tuple[float, int, "float | None", "dict[str, float | list[float]] | None"]
"""What the rollout worker sends per finished episode: (return, length, true objective or None when the env gave
none, extra stats or None). A plain tuple: it travels between processes in the messages' builtins-only wire form."""

_warned_keys: set[str] = set()


def reported_episode(info: dict, own_return: float, own_length: int, from_env_stats: bool) -> tuple[float, int] | None:
    """(return, length) to report now that the loop saw an episode end, or None while the env's own episode goes on."""
    if not from_env_stats:
        return own_return, own_length
    episode = info.get("episode")
    if episode is None:
        return None
    return float(episode["r"]), int(episode["l"])


def episode_record(info: dict, own_return: float, own_length: int, from_env_stats: bool) -> EpisodeRecord | None:
    """`reported_episode` with the env's true objective and extra stats from the same step's info."""
    episode = reported_episode(info, own_return, own_length, from_env_stats)
    if episode is None:
        return None
    objective = info.get("true_objective")
    extra = info.get("episode_extra_stats")
    return (
        episode[0],
        episode[1],
        None if objective is None else float(objective),
        None if extra is None else extra_stats(extra),
    )


def extra_stats(stats: Any) -> dict[str, float | list[float]]:
    """`info["episode_extra_stats"]` as builtins: leaf key -> float, or a list of floats for a sequence. A value that
    is not a number is left out, with a warning naming its key once per process."""
    if not isinstance(stats, dict):
        _warn_once("episode_extra_stats", f"is a {type(stats).__name__}, not a dict")
        return {}
    out: dict[str, float | list[float]] = {}
    for key, value in _leaves(stats):
        if isinstance(value, (Real, np.number, np.bool_)):  # a flag (success) averages to a rate
            out[key] = float(value)
        elif isinstance(value, (list, tuple, np.ndarray)) and _all_numbers(value):
            out[key] = [float(v) for v in np.asarray(value, dtype=np.float64).ravel()]
        else:
            _warn_once(key, f"is {type(value).__name__} {value!r:.40}, not a number")
    return out


def _leaves(stats: dict) -> Iterator[tuple[str, Any]]:
    for key, value in stats.items():
        if isinstance(value, dict):
            yield from _leaves(value)
        else:
            yield str(key), value


def _all_numbers(value) -> bool:
    try:
        return np.asarray(value).dtype.kind in "biuf"
    except (TypeError, ValueError):
        return False


def _warn_once(key: str, problem: str) -> None:
    if key not in _warned_keys:
        _warned_keys.add(key)
        log.warning("episode_extra_stats[%r] %s: left out of the episode statistics", key, problem)
