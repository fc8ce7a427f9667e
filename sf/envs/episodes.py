"""Which episodes are reported: the ones the rollout loop sees end, or the env's own.

With `--use_record_episode_statistics` an episode counts when the env says one ended (gymnasium's
`RecordEpisodeStatistics` puts `info["episode"]` on that step), with the env's return and length. Atari's stack ends
an episode for the learner at every lost life and clips its rewards; its own statistics see whole games and scores.
"""

from __future__ import annotations

NO_INFO: dict = {}


def reported_episode(info: dict, own_return: float, own_length: int, from_env_stats: bool) -> tuple[float, int] | None:
    """(return, length) to report now that the loop saw an episode end, or None while the env's own episode goes on."""
    if not from_env_stats:
        return own_return, own_length
    episode = info.get("episode")
    if episode is None:
        return None
    return float(episode["r"]), int(episode["l"])
