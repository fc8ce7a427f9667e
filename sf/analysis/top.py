"""`python -m sf.profile top <experiment dir>`: a running experiment, watched from its files.

It reads only what the run writes (`profile_live.jsonl`, or `profile_series.jsonl` for runs from before the live
feed; `config.json`, `summary.json`) and redraws every second: FPS now and over a minute, each component's busy /
waiting / loop-overhead shares as bars with its largest wait and on whom, CPU and memory per process, policy lag and
trajectory age, and the verdict of the last window with its what-if and the best layout move (`advice.advise`, the
same function the report and the progress line call).

Drawn with rich: a small, widely used library that renders styled text and redraws in place over plain SSH, falls
back to plain text when the output is not a terminal (`--once`), and needs no event loop of its own; the only input
is `q`, read from the terminal in cbreak mode, which needs nothing more.
"""

from __future__ import annotations

import json
import math
import os
import select
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console, Group
from rich.text import Text

from sf.analysis.advice import Advice, advise
from sf.analysis.consistency import Finding, check, clip_share
from sf.analysis.experiment_folder import folder_error
from sf.analysis.recent import LIVE_WINDOW_S, fps_over, recent_experiment, waiting_for
from sf.experiment.config_file import read_config_or_empty
from sf.profiling.live_feed import LIVE_FILE, Feed, Follower, Progress, read_records
from sf.profiling.series import SERIES_FILE, read_series
from sf.utils.roles import Role, role_of

WIDTH = 80
NAME_W, BAR_W = 18, 20
WAITS_ON = {  # whom a wait is for, in a word (the report's WAITED_ON says it in full)
    "wait_actions": "inference",
    "wait_requests": "rollout",
    "wait_trajectories": "rollout",
    "wait_slots": "learner:slots",
    "wait_policy_version": "learner:ver",
    "wait_batch": "batcher",
    "wait_messages": "others",
    "wait_transfer": "transfers",
    "wait_unattributed": "?",
}
STYLE = {"busy": "green", "wait": "yellow", "loop": "magenta"}


@dataclass
class Row:
    name: str
    node: str | None
    busy: float
    wait: float
    loop: float
    waits_on: str  # the largest wait, as whom it is for
    wait_share: float
    cpu: float | None  # cores, over the window
    peak_rss: int | None
    pid: int = 0
    same_process: bool = False  # hosted by the process of the row above: its CPU and memory are that one's


@dataclass
class Frame:
    """One screen's numbers, computed from files: what `render` draws and the tests read."""

    experiment: str
    state: str  # "running", "finished (ok)", "waiting for data", "replay"
    t: float | None  # the run's clock at the newest record
    window_s: float
    fps_now: float | None
    fps_minute: float | None
    frames: int | None
    progress: Progress | None
    advice: Advice | None
    rows: list[Row] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)  # components without two snapshots yet


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def build_frame(
    feed: Feed, experiment_dir: Path, config: dict, state: str, window_s: float = LIVE_WINDOW_S, until=None
) -> Frame:
    series = {n: s for n, s in feed.snapshots.items()}
    t = max((s[-1].t for s in series.values() if s), default=None)
    progress = next((p for p in reversed(feed.progress) if until is None or p.t <= until), None)
    experiment = recent_experiment(series, window_s, until, experiment_dir, {}, config)
    frame = Frame(
        str(experiment_dir),
        state,
        until if until is not None else t,
        window_s,
        experiment.fps if experiment else None,
        fps_over(series, 60.0, until),
        _frames(series, until),
        progress,
        None,
    )
    frame.waiting = waiting_for(series, experiment)
    if experiment is None:
        return frame
    frame.advice = advise(experiment)
    frame.findings = check(experiment)
    latest = {}  # each component's newest snapshot up to the moment shown
    for name, snaps in series.items():
        upto = [x for x in snaps if until is None or x.t <= until]
        if upto:
            latest[name] = upto[-1]
    first_role = {}
    for c in experiment.components:
        first_role[c.pid] = min(first_role.get(c.pid, (99, [], "")), _order(c.name))
    previous_pid = None
    components = sorted(
        experiment.components, key=lambda c: (feed.nodes.get(c.name, ""), first_role[c.pid], c.pid, _order(c.name))
    )
    for c in components:
        waits = {k: c.activity.share(v) for k, v in c.activity.waits.items()}
        key = max(waits, key=waits.get) if waits else None
        cpu = None
        if c.cpu_s is not None and (c.wall_s or 0) > 0:
            cpu = min(c.cpu_s / c.wall_s, float(c.cores or math.inf))
        frame.rows.append(
            Row(
                c.name,
                feed.nodes.get(c.name),
                clip_share(c.activity.share(c.activity.work_s)),
                clip_share(c.activity.share(c.activity.wait_s)),
                clip_share(c.activity.share(c.activity.overhead_s)),
                WAITS_ON.get(key, key[5:] if key else "-") if key else "-",
                clip_share(waits.get(key, 0.0)) if key else 0.0,
                cpu,
                latest[c.name].peak_rss_bytes if c.name in latest else None,
                c.pid,
                c.pid == previous_pid,
            )
        )
        previous_pid = c.pid
    return frame


def _order(name: str) -> tuple:
    """By role, then by the numbers in the name (w2 before w10)."""
    role = role_of(name)
    digits = [int(part) for part in "".join(c if c.isdigit() else " " for c in name).split()]
    roles = list(Role)
    return (roles.index(role) if role in roles else len(roles), digits, name)


def _frames(series, until) -> int | None:
    counts = [x.frames for s in series.values() for x in s if until is None or x.t <= until]
    return max(counts) if counts else None


# drawing ---------------------------------------------------------------------------------------------------


def _pct(value: float) -> str:
    return f"{value:4.0%}"


def _num(value: float | None, fmt: str = ",.0f") -> str:
    return "-" if value is None or (isinstance(value, float) and not math.isfinite(value)) else format(value, fmt)


def _bytes(count: int | None) -> str:
    if not count:
        return "-"
    return f"{count / 2**30:.1f}G" if count >= 2**30 else f"{count / 2**20:.0f}M"


def _bar(row: Row, width: int = BAR_W) -> Text:
    cells = [round(row.busy * width), round(row.wait * width), round(row.loop * width)]
    while sum(cells) > width:
        cells[cells.index(max(cells))] -= 1
    bar = Text()
    for (kind, char), n in zip((("busy", "█"), ("wait", "░"), ("loop", "▒")), cells):
        bar.append(char * n, style=STYLE[kind])
    bar.append("·" * (width - sum(cells)), style="dim")
    return bar


ABBREVIATIONS = (("RolloutWorker_", "Rollout "), ("InferenceWorker_", "Inference "), ("NodeAgent_", "NodeAgent "))


def _label(name: str) -> str:
    """Component names shortened to fit the table: `InferenceWorker_p0-w1` is `Inference p0-w1`."""
    for long, short in ABBREVIATIONS:
        if name.startswith(long):
            return short + name[len(long) :]
    return name


def _group(label: str) -> str:
    """A process group as the table names its members: `Inference+Rollout`."""
    for long, short in (("InferenceWorker", "Inference"), ("RolloutWorker", "Rollout"), (" + ", "+")):
        label = label.replace(long, short)
    return label


def _short(name: str, width: int) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def _rows_to_show(rows: list[Row], room: int) -> list[tuple[str, Row | None]]:
    """(label, row; None for a node's header): every component when they fit in `room` lines, else the mean of each
    role per node."""
    nodes = sorted({r.node for r in rows if r.node})
    if len(rows) + (len(nodes) if len(nodes) > 1 else 0) <= room:
        out = []
        for node in nodes if len(nodes) > 1 else [None]:
            if node is not None:
                out.append((f"node {node}", None))
            out += [(_label(r.name), r) for r in rows if node is None or r.node == node]
        return out
    out = []
    for node in nodes or [None]:
        if node is not None and len(nodes) > 1:
            out.append((f"node {node}", None))
        members = [r for r in rows if r.node == node or node is None]
        for role in dict.fromkeys(role_of(r.name) for r in members):
            group = [r for r in members if role_of(r.name) == role]
            if role == Role.LEARNER:  # one per policy: each keeps its row
                out += [(_label(r.name), r) for r in group]
                continue
            waits = [r.waits_on for r in group]
            cpus = [r.cpu for r in group if r.cpu is not None]
            mean = Row(
                role,
                node,
                sum(r.busy for r in group) / len(group),
                sum(r.wait for r in group) / len(group),
                sum(r.loop for r in group) / len(group),
                max(set(waits), key=waits.count),
                sum(r.wait_share for r in group) / len(group),
                sum(cpus) / len(cpus) if cpus else None,
                max((r.peak_rss or 0) for r in group) or None,
            )
            out.append((f"{role} x{len(group)}" if len(group) > 1 else _label(group[0].name), mean))
    return out


def render(frame: Frame, height: int = 24, width: int = WIDTH) -> Group:
    lines: list[Text] = []
    clock = f" · {frame.t:,.0f} s" if frame.t is not None and not frame.state.startswith("replay") else ""
    lines.append(Text.assemble(("sf top ", "bold"), _short(frame.experiment, width - 40), f" · {frame.state}{clock}"))
    lines.append(
        Text(
            f"FPS {_num(frame.fps_now)} (last {frame.window_s:.0f} s) · {_num(frame.fps_minute)} (last 60 s) · "
            f"frames {_num(frame.frames)}"
        )
    )
    advice = frame.advice
    if advice is None:
        lines.append(Text("waiting for two snapshots of every component (one every 2 s once the run has started)"))
    else:
        v = advice.verdict
        lines.append(
            Text.assemble(("verdict ", "bold"), (advice.headline(), "bold red"), f" (last {frame.window_s:.0f} s)")
        )
        lines.append(Text(_short("limit: " + _group(advice.limit_line()), width)))
        best = v.what_if[0] if v.what_if else None
        if best is not None:
            lines.append(
                Text(
                    f"what if {best.kind} were {best.speedup:g}x faster: {best.fps_gain:+.0%} FPS "
                    f"(then limited by {_group(best.limit)})"
                )
            )
        if advice.moves:
            m = advice.moves[0]
            lines.append(Text(f"advice: {m.flag}={m.to} (now {m.now}): {m.fps_gain:+.0%} FPS, then {_group(m.limit)}"))
    p = frame.progress
    if p is not None:
        lag = f"policy lag {_num(p.policy_lag, '.2f')}"
        if p.policy_lag_max is not None:
            lag += f" (max {p.policy_lag_max:.0f})"
        if p.trajectory_age_p50_s is not None and p.trajectory_age_p95_s is not None:
            lag += f" · trajectory age p50 {p.trajectory_age_p50_s:.3g} s, p95 {p.trajectory_age_p95_s:.3g} s"
        lines.append(Text(lag))
        if p.policies:
            lines += [Text(line) for line in _policies_lines(p.objective or "objective", p.policies, width)]
    for f in frame.findings[:2]:
        lines.append(Text(_short("! " + f.line(), width), style="bold yellow"))
    if frame.waiting and frame.advice is not None:
        lines.append(Text(_short("no two snapshots yet: " + ", ".join(map(_label, frame.waiting)), width), style="dim"))
    if frame.rows:
        lines.append(
            Text(
                f"{'component':<{NAME_W}} {'busy █ wait ░ loop ▒':<{BAR_W}} busy wait loop {'waits on':<13} "
                f"{'cpu':>4} {'mem':>5}",
                style="bold",
            )
        )
        room = max(3, height - len(lines) - 2)
        for label, row in _rows_to_show(frame.rows, room):
            if row is None:
                lines.append(Text(label, style="bold cyan"))
                continue
            line = Text(f"{_short(label, NAME_W):<{NAME_W}} ")
            line.append_text(_bar(row))
            cpu, mem = ('"', '"') if row.same_process else (_num(row.cpu, "4.1f"), _bytes(row.peak_rss))
            line.append(
                f" {_pct(row.busy)} {_pct(row.wait)} {_pct(row.loop)} {_short(row.waits_on, 13):<13} {cpu:>4} {mem:>5}"
            )
            lines.append(line)
    lines.append(Text('q quits · cpu: cores over the window, mem: peak memory (" same process)', style="dim"))
    return Group(*lines)


def _policies_lines(objective: str, policies: dict, width: int) -> list[str]:
    """`true_objective: p0 253 (lag 0.40) · p1 230 (lag 0.20)`, wrapped at `width`: each policy's objective and lag,
    as the runner last reported them."""
    parts = []
    for p, entry in policies.items():
        lag = entry.get("lag")
        parts.append(f"p{p} {_num(entry.get('objective'), '.4g')}" + (f" (lag {lag:.2f})" if lag is not None else ""))
    lines, current = [], f"{objective}:"
    for part in parts:
        sep = " " if current.endswith(":") else " · "
        if len(current) + len(sep) + len(part) > width and not current.endswith(":"):
            lines.append(current)
            current, sep = " ", " "
        current += sep + part
    return [*lines, current]


def frame_text(frame: Frame, width: int = WIDTH, height: int = 24) -> str:
    """One frame as plain text (no colours, no cursor movement): what `--once` prints."""
    console = Console(width=width, color_system=None, force_terminal=False, record=True, file=open(os.devnull, "w"))
    console.print(render(frame, height, width))
    return console.export_text()


# sources ---------------------------------------------------------------------------------------------------


def _state(experiment_dir: Path, feed: Feed) -> str:
    finals = any(s and s[-1].final for s in feed.snapshots.values())
    summary = _read_json(experiment_dir / "summary.json")
    live = experiment_dir / LIVE_FILE
    ended = summary and (not live.exists() or (experiment_dir / "summary.json").stat().st_mtime >= live.stat().st_mtime)
    if finals or ended:
        return f"finished ({summary.get('status', '?')})" if summary else "finished"
    return "running" if feed.snapshots else "waiting for data"


class LiveSource:
    """The running experiment's feed, read incrementally."""

    def __init__(self, experiment_dir: Path):
        self.dir = experiment_dir
        name = (
            LIVE_FILE
            if (experiment_dir / LIVE_FILE).exists() or not (experiment_dir / SERIES_FILE).exists()
            else SERIES_FILE
        )
        self.follower = Follower(experiment_dir, name=name)

    def frame(self, window_s: float) -> Frame:
        feed = self.follower.poll()
        if not feed.snapshots and (self.dir / LIVE_FILE).exists() and self.follower.path.name != LIVE_FILE:
            self.follower = Follower(self.dir)
            feed = self.follower.poll()
        return build_frame(feed, self.dir, read_config_or_empty(self.dir), _state(self.dir, feed), window_s)


class ReplaySource:
    """A finished experiment played back: its feed (or its series) up to a clock that runs `speed` times faster."""

    def __init__(self, experiment_dir: Path, speed: float, at: float | None = None):
        self.dir = experiment_dir
        self.feed = Feed()
        records = read_records(experiment_dir)
        if not any("component" in r for r in records):
            records = [
                {**s.__dict__, "component": name, "final": s.final}
                for name, snaps in read_series(experiment_dir).items()
                for s in snaps
            ]
        for r in sorted(records, key=lambda r: r.get("t") or r.get("progress", {}).get("t", 0.0)):
            self.feed.add(r)
        times = [s.t for snaps in self.feed.snapshots.values() for s in snaps]
        self.start, self.end = (min(times), max(times)) if times else (0.0, 0.0)
        self.speed = speed
        self.began = time.monotonic()
        self.at = at

    def now(self) -> float:
        if self.at is not None:
            return min(self.at, self.end)
        return min(self.end, self.start + (time.monotonic() - self.began) * self.speed)

    def frame(self, window_s: float) -> Frame:
        now = self.now()
        state = f"replay at {now:,.0f} of {self.end:,.0f} s" + (" (end)" if now >= self.end else "")
        return build_frame(self.feed, self.dir, read_config_or_empty(self.dir), state, window_s, until=now)


# the terminal ----------------------------------------------------------------------------------------------


class _Keys:
    """`q` from the terminal, without Enter (cbreak mode), restored on exit; nothing when stdin is no terminal."""

    def __enter__(self):
        self.saved = None
        if sys.stdin.isatty():
            import termios
            import tty

            self.saved = termios.tcgetattr(sys.stdin)
            tty.setcbreak(sys.stdin.fileno())
        return self

    def wait(self, seconds: float) -> str | None:
        if self.saved is None:
            time.sleep(seconds)
            return None
        ready, _, _ = select.select([sys.stdin], [], [], seconds)
        return os.read(sys.stdin.fileno(), 16).decode(errors="ignore") if ready else None

    def __exit__(self, *exc):
        if self.saved is not None:
            import termios

            termios.tcsetattr(sys.stdin, termios.TCSADRAIN, self.saved)


def watch(source, interval: float, window_s: float) -> None:
    from rich.live import Live

    console = Console()
    with _Keys() as keys, Live(console=console, screen=True, auto_refresh=False) as live:
        while True:
            height, width = console.size.height, console.size.width
            live.update(render(source.frame(window_s), height, min(width, 120)), refresh=True)
            key = keys.wait(interval)
            if key and "q" in key.lower():
                return


NO_TERMINAL = (
    "sf.profile top: the output is no terminal, so this is one frame, not a live view; --once prints one frame on "
    "purpose (in scripts), a terminal shows the run live"
)


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m sf.profile top",
        description="Watch a running experiment (or replay a finished one): FPS, each component's work and waits, "
        "the verdict of the last seconds and what to change. Reads the run's files only; q quits.",
    )
    parser.add_argument("experiment_dir", help="<train_dir>/<experiment> of a running or finished run")
    parser.add_argument("--once", action="store_true", help="print one frame as plain text and exit")
    parser.add_argument("--replay", action="store_true", help="play a finished run back from its start")
    parser.add_argument("--speed", type=float, default=5.0, help="replay: run seconds per second (default 5)")
    parser.add_argument("--at", type=float, help="replay: the run's second to show (with --once)")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between redraws (default 1)")
    parser.add_argument(
        "--window", type=float, default=LIVE_WINDOW_S, help=f"seconds the verdict covers (default {LIVE_WINDOW_S:g})"
    )
    parser.add_argument("--width", type=int, default=WIDTH, help="--once: columns (default 80)")
    args = parser.parse_args(argv)
    path = Path(args.experiment_dir)
    if not path.is_dir() and (args.replay or args.once):  # live, it may be a run that has not started yet
        print(folder_error("experiment_dir", path), file=sys.stderr)
        return 2
    if args.replay:
        at = args.at if args.at is not None else (math.inf if args.once else None)
        source = ReplaySource(path, args.speed, at)
    else:
        source = LiveSource(path)
    if args.once:
        print(frame_text(source.frame(args.window), args.width), end="")
        return 0
    if not sys.stdout.isatty():  # a live screen needs a terminal: a pipe or a file gets one frame and a hint
        print(frame_text(source.frame(args.window), args.width), end="")
        print(NO_TERMINAL, file=sys.stderr)
        return 0
    try:
        watch(source, args.interval, args.window)
    except KeyboardInterrupt:
        pass
    return 0
