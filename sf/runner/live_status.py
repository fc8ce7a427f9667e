"""The runner's side of watching a run: the live feed, the recent snapshots, and the verdict on the progress line.

Every snapshot a component sends goes to `profile_live.jsonl` (`live_feed`) and into a short in-memory history; at
each progress line the history's last `LIVE_WINDOW_S` seconds become an `Experiment` (`recent`), which gets the same
verdict and advice as the report (`advice.advise`). The progress line carries the headline (`learner-bound 93 %`);
the first line with a verdict, and every `ADVICE_EVERY`-th after it, also the best move and the first warning. The
feed gets the numbers, for `sf.profile top`.
"""

from __future__ import annotations

from pathlib import Path

from sf.analysis.advice import advise
from sf.analysis.consistency import check
from sf.analysis.recent import LIVE_WINDOW_S, recent_experiment
from sf.profiling.live_feed import LiveFeed
from sf.profiling.series import Snapshot, snapshot_from_record

KEEP_S = 30.0
ADVICE_EVERY = 6  # progress lines (30 s at one per 5 s)


class LiveStatus:
    def __init__(self, experiment_dir: Path, config: dict):
        self.feed = LiveFeed(experiment_dir)
        self.config = config
        self.recent: dict[str, list[Snapshot]] = {}
        self.lines = 0
        self.advised_at: int | None = None  # the progress line that last carried the advice

    def snapshot(self, record: dict) -> None:
        """A snapshot record (`series.snapshot_record`), periodic or final."""
        self.feed.append(record)
        if record["final"]:
            return
        snaps = self.recent.setdefault(record["component"], [])
        snaps.append(snapshot_from_record(record))
        while len(snaps) > 2 and snaps[-1].t - snaps[1].t >= KEEP_S:
            snaps.pop(0)

    def progress(self, record: dict) -> str:
        """Write a progress record with the verdict of the last window; return what the progress line adds."""
        experiment = recent_experiment(self.recent, LIVE_WINDOW_S, config=self.config)
        suffix = ""
        if experiment is not None:
            advice = advise(experiment)
            record["verdict"] = advice.headline()
            suffix = f". Bound (last {LIVE_WINDOW_S:.0f} s): {record['verdict']}"
            if self.advised_at is None or self.lines - self.advised_at >= ADVICE_EVERY:
                self.advised_at = self.lines
                if advice.moves:
                    suffix += f". Try {advice.moves[0].progress_text()}"
                findings = check(experiment)
                if findings:
                    suffix += f". Warning: {findings[0].line()}"
        self.lines += 1
        self.feed.append({"progress": record})
        return suffix
