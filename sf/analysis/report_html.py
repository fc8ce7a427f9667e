"""`profiling/report.html` and `profiling/compare.html`: one self-contained page each, readable on a laptop.

The page puts the answer first (the verdict in a few words, why, what a faster part or a different layout would buy),
then the numbers behind it as tables that sort by any column, charts drawn as inline SVG (no image files, no
scripts from elsewhere: a page mailed or copied alone still works), one section per component with its busiest
scopes, and links to every file the run left (the timeline, each profiler's output, the JSON files).
"""

from __future__ import annotations

import html
import math
from pathlib import Path

from sf.analysis.advice import advise
from sf.analysis.charts import COLORS, MARKED, UNMARKED
from sf.analysis.compare import fps_line, ordered, value_text
from sf.analysis.report import SERIAL_WAITS, WAITED_ON, Report
from sf.analysis.run_data import Experiment, subtract_trees
from sf.profiling.live_feed import read_records
from sf.profiling.series import snapshot_from_record
from sf.utils.roles import Role, role_of

FPS_SPAN_S = 5.0
OPENERS = (  # how to open each profiler's output (docs/profiling.md, "Outputs and viewers")
    (".pt.trace.json", "a torch trace: ui.perfetto.dev or chrome://tracing"),
    (".speedscope.json", "speedscope.app"),
    (".prof", "python -m pstats, snakeviz"),
    (".pstat", "python -m pstats"),
    ("callgrind.out.", "KCachegrind, QCachegrind"),
    (".svg", "a flame graph: a browser"),
    (".html", "pyinstrument: a browser"),
    (".nsys-rep", "Nsight Systems, nsys stats"),
    (".launch.sh", "the command line that started the process"),
    (".py-spy.log", "py-spy's own log"),
)
LINE_COLORS = ("#0969da", "#cf222e", "#2e7d32", "#8250df", "#bf8700", "#1b7c83", "#e16f24", "#6e7781")

CSS = """
:root { --fg: #1f2328; --muted: #59636e; --line: #d1d9e0; --card: #f6f8fa; --accent: #0969da; }
* { box-sizing: border-box; }
body { margin: 0; color: var(--fg); background: #fff;
  font: 14px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; }
main { max-width: 1180px; margin: 0 auto; padding: 18px 24px 64px; }
h1 { font-size: 20px; margin: 0 0 2px; } h2 { font-size: 17px; margin: 28px 0 8px; }
h3 { font-size: 15px; margin: 14px 0 6px; }
.muted { color: var(--muted); } code { font: 12.5px ui-monospace, "DejaVu Sans Mono", monospace; }
.hero { display: grid; grid-template-columns: 1.1fr 1fr; gap: 18px; margin-top: 14px; align-items: start; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 14px 16px; }
.verdict { font-size: 28px; font-weight: 700; color: var(--fg); margin: 0; }
.why { margin: 6px 0 0; }
.warn { background: #fff8c5; border: 1px solid #d4a72c; border-radius: 8px; padding: 8px 14px; margin-top: 14px; }
.warn li { margin: 2px 0; }
.moves li { margin: 6px 0; } .gain { font-weight: 700; color: #1a7f37; }
.fps { display: flex; gap: 12px; flex-wrap: wrap; margin-top: 14px; }
.fps .card { flex: 1 1 220px; padding: 10px 14px; } .fps b { font-size: 20px; display: block; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--line); vertical-align: middle; }
td:first-child { white-space: nowrap; }
th { background: var(--card); position: sticky; top: 0; font-weight: 600; white-space: nowrap; }
table.sortable th { cursor: pointer; } table.sortable th:hover { color: var(--accent); }
th.asc::after { content: " \\25B2"; font-size: 10px; } th.desc::after { content: " \\25BC"; font-size: 10px; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.bar { display: flex; width: 160px; height: 12px; border-radius: 2px; overflow: hidden; background: #eaeef2; }
.bar span { display: block; height: 100%; }
.legend span { display: inline-block; width: 10px; height: 10px; margin: 0 4px 0 12px; border-radius: 2px; }
details { border: 1px solid var(--line); border-radius: 8px; margin: 8px 0; padding: 6px 12px; }
summary { cursor: pointer; font-weight: 600; display: flex; gap: 12px; align-items: center; }
.charts { display: grid; grid-template-columns: 1fr 1fr; gap: 18px; }
svg text { font: 11px system-ui, "DejaVu Sans", sans-serif; fill: var(--fg); }
.files li { margin: 2px 0; } .marked td { background: #ffebe9; }
@media (max-width: 900px) { .hero, .charts { grid-template-columns: 1fr; } }
"""

SORT_JS = """
document.querySelectorAll("table.sortable th").forEach(function (th, col) {
  th.addEventListener("click", function () {
    var table = th.closest("table"), body = table.tBodies[0];
    var asc = !th.classList.contains("asc");
    table.querySelectorAll("th").forEach(function (h) { h.classList.remove("asc", "desc"); });
    th.classList.add(asc ? "asc" : "desc");
    var index = Array.prototype.indexOf.call(th.parentNode.children, th);
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = a.cells[index].getAttribute("data-v"), y = b.cells[index].getAttribute("data-v");
      var nx = parseFloat(x), ny = parseFloat(y), r;
      if (!isNaN(nx) && !isNaN(ny)) { r = nx - ny; } else { r = String(x).localeCompare(String(y)); }
      return asc ? r : -r;
    });
    rows.forEach(function (r) { body.appendChild(r); });
  });
});
"""


def esc(value) -> str:
    return html.escape(str(value))


def pct(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.0%}"


def cell(text, value=None, num: bool = False) -> str:
    """A table cell sorting by `value` (defaults to its text)."""
    v = text if value is None else value
    if isinstance(v, float) and not math.isfinite(v):
        v = 1e308 if v > 0 else -1e308
    return f'<td{" class=num" if num else ""} data-v="{esc(v)}">{text}</td>'


def stacked_bar(work: float, wait: float, loop: float) -> str:
    parts = [
        (work, COLORS["work"], "work"),
        (wait, COLORS["wait"], "wait"),
        (loop, COLORS["loop overhead"], "loop overhead"),
    ]
    spans = "".join(
        f'<span style="width:{100 * v:.1f}%;background:{c}" title="{t} {v:.0%}"></span>' for v, c, t in parts if v > 0
    )
    return f'<div class="bar">{spans}</div>'


def table(headers: list[tuple[str, bool]], rows: list[str], sortable: bool = True, cls: str = "") -> str:
    head = "".join(f"<th{' class=num' if num else ''}>{esc(h)}</th>" for h, num in headers)
    classes = " ".join(c for c in ("sortable" if sortable else "", cls) if c)
    return f'<table class="{classes}"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def legend() -> str:
    return (
        '<div class="legend muted">'
        + "".join(
            f'<span style="background:{COLORS[k]}"></span>{label}'
            for k, label in (
                ("work", "work"),
                ("wait", "waiting"),
                ("loop overhead", "loop overhead"),
            )
        )
        + "</div>"
    )


# charts -----------------------------------------------------------------------------------------------------


def line_chart(title: str, series: dict[str, list[tuple[float, float]]], y_label: str, percent: bool = False) -> str:
    """An inline SVG line chart of (x, y) series against the run's clock."""
    w, h, left, right, top, bottom = 540, 230, 52, 12, 26, 34
    points = [p for s in series.values() for p in s]
    if not points:
        return f"<div><h3>{esc(title)}</h3><p class=muted>no two snapshots of a component to draw from</p></div>"
    x0, x1 = min(p[0] for p in points), max(p[0] for p in points)
    y1 = max(max(p[1] for p in points), 1e-9)
    y1 = 1.0 if percent else _nice(y1)
    x1 = x1 if x1 > x0 else x0 + 1

    def sx(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * (w - left - right)

    def sy(y: float) -> float:
        return top + (1 - min(y, y1) / y1) * (h - top - bottom)

    grid = []
    for i in range(5):
        y = y1 * i / 4
        label = f"{y:.0%}" if percent else f"{y:,.0f}"
        grid.append(
            f'<line x1="{left}" x2="{w - right}" y1="{sy(y):.1f}" y2="{sy(y):.1f}" stroke="#d1d9e0" stroke-width="1"/>'
            f'<text x="{left - 6}" y="{sy(y) + 4:.1f}" text-anchor="end">{label}</text>'
        )
    for i in range(5):
        x = x0 + (x1 - x0) * i / 4
        label = f"{x:,.0f}" if x1 - x0 >= 20 else f"{x:.1f}"
        grid.append(f'<text x="{sx(x):.1f}" y="{h - bottom + 16}" text-anchor="middle">{label} s</text>')
    lines, keys = [], []
    for i, (name, pts) in enumerate(series.items()):
        color = LINE_COLORS[i % len(LINE_COLORS)]
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        lines.append(
            f'<polyline fill="none" stroke="{color}" stroke-width="1.8" points="{path}">'
            f"<title>{esc(name)}</title></polyline>"
        )
        if len(pts) <= 40:  # few points: mark each, a single one would draw no line
            lines += [f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5" fill="{color}"/>' for x, y in pts]
        keys.append(f'<span style="background:{color}"></span>{esc(name)}')
    svg = (
        f'<svg viewBox="0 0 {w} {h}" width="100%" role="img" aria-label="{esc(title)}">'
        f"{''.join(grid)}{''.join(lines)}"
        f'<text x="{left}" y="14" class="muted">{esc(y_label)}</text></svg>'
    )
    return f'<div><h3>{esc(title)}</h3>{svg}<div class="legend muted">{"".join(keys)}</div></div>'


def _nice(value: float) -> float:
    """A round number just above `value`, for an axis."""
    exp = 10 ** math.floor(math.log10(value))
    return next(m * exp for m in (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10) if m * exp >= value)


def snapshots_over_time(experiment: Experiment) -> dict:
    """The densest record of the run: the live feed (a snapshot every 2 s, the last part of a long run) when it holds
    more snapshots than the series (one every --experiment_summaries_interval)."""
    live: dict = {}
    for record in read_records(experiment.path):
        if "component" in record:
            live.setdefault(record["component"], []).append(snapshot_from_record(record))
    count = sum(len(v) for v in live.values())
    return live if count > sum(len(v) for v in experiment.series.values()) else experiment.series


def over_time(experiment: Experiment) -> tuple[dict, dict]:
    """The frame rate between consecutive snapshots, and each component's busy share."""
    fps: dict[str, list[tuple[float, float]]] = {}
    busy: dict[str, list[tuple[float, float]]] = {}
    series = snapshots_over_time(experiment)
    longest = max(
        ((n, s) for n, s in series.items() if role_of(n) != Role.RUNNER),
        key=lambda kv: len(kv[1]),
        default=None,
    )
    if longest is not None:
        # the frame counter moves in whole learner batches: a rate over single 1-2 s intervals zigzags, so each
        # point spans at least FPS_SPAN_S
        snaps = [s for s in longest[1] if not s.final]
        points = []
        for i, a in enumerate(snaps):
            b = next((b for b in snaps[i + 1 :] if b.t - a.t >= FPS_SPAN_S), None)
            if b is not None:
                points.append(((a.t + b.t) / 2, (b.frames - a.frames) / (b.t - a.t)))
        if points:
            fps[f"frames per second (over {FPS_SPAN_S:g} s)"] = points
        elif len(longest[1]) >= 2 and longest[1][-1].t > longest[1][0].t:
            # a run shorter than one span: its one rate as a level line over the window it covers, so the axis is
            # that window (a single point drew one dot on an axis of its own making)
            a, b = longest[1][0], longest[1][-1]
            rate = (b.frames - a.frames) / (b.t - a.t)
            fps[f"frames per second ({a.t:.1f} s to {b.t:.1f} s)"] = [(a.t, rate), (b.t, rate)]
    for name, snaps in series.items():
        if role_of(name) == Role.RUNNER:
            continue
        snaps = [s for s in snaps if s.lifetime_s is not None]
        points = []
        for a, b in zip(snaps, snaps[1:]):
            span = b.lifetime_s - a.lifetime_s
            if span <= 0:
                continue
            delta = subtract_trees(b.tree, a.tree)
            work = sum(v["time"] for k, v in delta.items() if not k.startswith("wait_") and k != "loop_overhead")
            points.append(((a.t + b.t) / 2, min(1.0, work / span)))
        if points:
            busy[name] = points
    return fps, busy


# the report page -------------------------------------------------------------------------------------------


def _files(experiment_dir: Path, out: Path) -> str:
    """Links to what the run left: the timeline, each profiler output, the JSON files, the log."""
    items = []
    timeline = out / "timeline.json"
    if timeline.exists():
        items.append(
            '<li><a href="timeline.json">timeline.json</a>: every scope and message of every process; open it in '
            "<code>ui.perfetto.dev</code> (Open trace file) or <code>chrome://tracing</code></li>"
        )
    mine = {"report.html", "compare.html", "timeline.json"}
    outputs = sorted(
        p for p in out.rglob("*") if p.is_file() and p.name not in mine and not p.name.startswith("report_")
    )
    for p in outputs:
        rel = p.relative_to(out).as_posix()
        opener = next((how for suffix, how in OPENERS if p.name.endswith(suffix) or p.name.startswith(suffix)), "")
        items.append(
            f'<li><a href="{esc(rel)}">{esc(rel)}</a> <span class=muted>({_size(p.stat().st_size)})'
            + (f"; {esc(opener)}" if opener else "")
            + "</span></li>"
        )
    for name, what in (
        ("profile.json", "every component's Timing tree, resources and work / wait split"),
        ("profile_series.jsonl", "the snapshots this report's window comes from"),
        ("summary.json", "frames, FPS figures, rewards, staleness"),
        ("config.json", "the full resolved config"),
        ("sf_log.txt", "the console log"),
    ):
        if (experiment_dir / name).exists():
            items.append(f'<li><a href="../{name}">{name}</a>: {what}</li>')
    if (experiment_dir / ".summary").exists():
        items.append(
            f"<li>TensorBoard: <code>tensorboard --logdir {esc(experiment_dir / '.summary')}</code> "
            "(Custom Scalars tab: the profile dashboard; <code>tensorboard</code> comes with sf's profiling extra, "
            "<code>pip install tensorboard</code> otherwise)</li>"
        )
    return '<ul class="files">' + "".join(items) + "</ul>"


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _component_section(row, component) -> str:
    scopes = []

    def walk(node: dict, prefix: str, depth: int) -> None:
        for key, child in sorted(node.items(), key=lambda kv: -kv[1]["time"]):
            share = component.activity.share(child["time"])
            scopes.append(
                "<tr>"
                + cell(f'<code style="padding-left:{12 * depth}px">{esc(key)}</code>', prefix + key)
                + cell(f"{child['time']:.3f}", child["time"], True)
                + cell(pct(min(share, 1.0)), share, True)
                + "</tr>"
            )
            walk(child.get("children", {}), f"{prefix}{key}/", depth + 1)

    walk(component.tree, "", 0)
    waits = ", ".join(
        f"{esc(k)} {pct(v)} ({esc(WAITED_ON.get(k, k))})" for k, v in sorted(row.waits.items(), key=lambda kv: -kv[1])
    )
    return (
        f"<details><summary>{stacked_bar(row.work, row.wait, row.overhead)} {esc(row.name)}"
        f' <span class="muted">work {pct(row.work)}, waiting {pct(row.wait)}, loop {pct(row.overhead)}</span></summary>'
        f"<p class=muted>waits: {waits or 'none'}; pid {row.pid}"
        + (f"; {row.cpu:.2f} cores" if row.cpu is not None else "")
        + "</p>"
        + table(
            [("scope (its tree over the window)", False), ("seconds", True), ("share of lifetime", True)],
            scopes,
            cls="tree",
        )
        + "</details>"
    )


def report_page(report: Report, experiment: Experiment, out: Path) -> str:
    v = report.verdict
    what_if_rows = [
        "<tr>"
        + cell(esc(w.kind))
        + cell(
            f'<span class="gain">{w.fps_gain:+.0%}</span>' if math.isfinite(w.fps_gain) else "unbounded",
            w.fps_gain,
            True,
        )
        + cell(esc(w.limit))
        + "</tr>"
        for w in v.what_if
    ]
    moves = (
        "".join(
            f'<li><code>{esc(m.flag)}={esc(m.to)}</code> <span class="muted">(now {esc(m.now)})</span>: '
            f'about <span class="gain">{m.fps_gain:+.0%}</span> FPS, then limited by {esc(m.limit)}<br>'
            f'<span class="muted">{esc(m.why)}</span></li>'
            for m in report.moves
        )
        or "<li class=muted>no layout move the model can price would buy more than 10 %</li>"
    )
    warnings = (
        '<div class="warn"><b>Check these first</b><ul>'
        + "".join(f"<li>{esc(w)}</li>" for w in report.warnings)
        + "</ul></div>"
        if report.warnings
        else ""
    )
    fps_cards = "".join(
        f'<div class="card"><b>{f.fps:,.0f}</b> frames/s <span class="muted">{esc(f.window)}</span></div>'
        for f in report.fps_figures
    )
    by_name = {c.name: c for c in experiment.components}
    rows = []
    for r in report.components:
        top_wait = max(r.waits, key=r.waits.get) if r.waits else ""
        spot = r.hotspots[0] if r.hotspots else ("", 0.0)
        rows.append(
            "<tr>"
            + cell(esc(r.name))
            + cell(stacked_bar(r.work, r.wait, r.overhead), r.work)
            + cell(pct(r.work), r.work, True)
            + cell(pct(r.wait), r.wait, True)
            + cell(pct(r.overhead), r.overhead, True)
            + cell(
                esc(WAITED_ON.get(top_wait, top_wait)) + (f" ({pct(r.waits[top_wait])})" if top_wait else ""), top_wait
            )
            + cell("-" if r.cpu is None else f"{r.cpu:.2f}", -1 if r.cpu is None else r.cpu, True)
            + cell(f"{r.lifetime_s:.1f} s", r.lifetime_s, True)
            + cell(f"<code>{esc(spot[0])}</code> {pct(spot[1])}", spot[1])
            + "</tr>"
        )
    components = table(
        [
            ("component", False),
            ("work / waiting / loop", False),
            ("work", True),
            ("waiting", True),
            ("loop", True),
            ("largest wait: for whom", False),
            ("cores", True),
            ("window", True),
            ("top hotspot", False),
        ],
        rows,
    )
    wait_rows = [
        "<tr>"
        + cell(esc(f"{w.role} (x{w.count})" if w.count > 1 else w.role))
        + cell(pct(w.idle), w.idle, True)
        + cell(esc(w.waiting_for))
        + cell(f"<code>{esc(w.key)}</code>", w.key)
        + "</tr>"
        for w in report.waits
    ]
    fps_series, busy_series = over_time(experiment)
    charts = (
        '<div class="charts">'
        + line_chart("Frame rate over the run", fps_series, "frames/s")
        + line_chart(
            "Busy share of each component over the run", busy_series, "share of its time working", percent=True
        )
        + "</div>"
    )
    sections = "".join(_component_section(r, by_name[r.name]) for r in report.components if r.name in by_name)
    config = experiment.config
    layout = " · " + ", ".join(
        f"{k} {esc(config[k])}"
        for k in ("num_workers", "num_envs_per_worker", "inference_placement", "batch_size", "serial_mode")
        if k in config
    )
    body = f"""
<h1>sf profile report</h1>
<div class="muted"><code>{esc(report.experiment)}</code> · window: {esc(report.window)}{layout}</div>
{warnings}
<div class="hero">
  <div class="card">
    <p class="verdict">{esc(report.headline)}</p>
    <p class="why"><b>verdict: {esc(v.kind)}-bound.</b> Rate limited by {esc(v.explanation or v.limiting)}.</p>
    <h3>Advice: layout moves the model can price</h3>
    <ul class="moves">{moves}</ul>
  </div>
  <div class="card">
    <h3 style="margin-top:0">What if one kind of work were {v.what_if[0].speedup:g}x faster</h3>
    {table([("kind", False), ("FPS", True), ("then limited by", False)], what_if_rows)}
    <h3>Process groups</h3>
    <ul>{"".join(f"<li>{esc(e)}</li>" for e in v.evidence)}</ul>
  </div>
</div>
<div class="fps">{fps_cards}</div>
<h2>Components</h2>
{legend()}
{components}
<h2>Who waits on whom</h2>
{f'<p class="muted">{esc(SERIAL_WAITS)}</p>' if report.serial else ""}
{table([("component", False), ("idle", True), ("waiting for", False), ("key", False)], wait_rows)}
<h2>Over the run</h2>
{charts}
<h2>Each component</h2>
<p class="muted">Every scope of its Timing tree over the window, busiest first; click a header to sort.</p>
{sections}
<h2>Files of this run</h2>
{_files(experiment.path, out)}
"""
    return page("sf profile report: " + report.headline, body)


def page(title: str, body: str) -> str:
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body><main>{body}</main>"
        f"<script>{SORT_JS}</script></body></html>"
    )


def write_report_page(report: Report, experiment: Experiment, path: Path) -> Path:
    path.write_text(report_page(report, experiment, path.parent))
    return path


# the diff page ---------------------------------------------------------------------------------------------


def diff_chart(rows, top: int = 20) -> str:
    """The largest relative changes as horizontal bars, marked ones red, the noise (two standard deviations,
    the marking threshold) as a grey band around zero."""
    shown = sorted((r for r in rows if math.isfinite(r.change)), key=lambda r: (not r.marked, -abs(r.change)))[:top]
    if not shown:
        return ""
    w, row_h, label_w = 1000, 20, 430
    h = row_h * len(shown) + 30
    span = max(max(abs(r.change) for r in shown), max(2 * r.noise for r in shown), 0.2)
    mid = label_w + (w - label_w - 20) / 2
    scale = (w - label_w - 30) / 2 / span
    parts = [f'<line x1="{mid}" x2="{mid}" y1="0" y2="{h - 24}" stroke="#59636e"/>']
    for i, r in enumerate(shown):
        y = i * row_h + 4
        noise = 2 * r.noise * scale
        x = mid + min(0.0, r.change) * scale
        color = MARKED if r.marked else UNMARKED
        parts.append(
            f'<rect x="{mid - noise:.1f}" y="{y}" width="{2 * noise:.1f}" height="{row_h - 6}" fill="#eaeef2"/>'
            f'<rect x="{x:.1f}" y="{y + 3}" width="{abs(r.change) * scale:.1f}" height="{row_h - 12}" fill="{color}">'
            f"<title>{esc(r.key)} {r.change:+.0%} (noise {r.noise:.0%})</title></rect>"
            f'<text x="{label_w - 8}" y="{y + 11}" text-anchor="end">{esc(r.key[-60:])}</text>'
        )
    for f in (-span, 0.0, span):
        parts.append(f'<text x="{mid + f * scale:.1f}" y="{h - 8}" text-anchor="middle">{f:+.0%}</text>')
    return f'<svg viewBox="0 0 {w} {h}" width="100%" role="img" aria-label="changes">{"".join(parts)}</svg>'


def compare_page(comparison, run: Experiment, baseline: Experiment) -> str:
    marked = comparison.marked
    rows = []
    for r in ordered(comparison.rows):
        change = f"{r.change:+.0%}" if math.isfinite(r.change) else "new"
        rows.append(
            f'<tr class="{"marked" if r.marked else ""}">'
            + cell("*" if r.marked else "", int(r.marked))
            + cell(f"<code>{esc(r.key)}</code>", r.key)
            + cell(esc(value_text(r.a, r.unit)), -1 if r.a is None else r.a, True)
            + cell(esc(value_text(r.b, r.unit)), -1 if r.b is None else r.b, True)
            + cell(change, r.change, True)
            + cell("" if r.process_change is None else f"{r.process_change:+.0%}", r.process_change or 0.0, True)
            + cell(f"{r.noise:.0%}", r.noise, True)
            + "</tr>"
        )
    headline = fps_line(comparison)
    marked_items = "".join(
        f"<li><code>{esc(r.key)}</code> {r.change:+.0%}</li>"
        if math.isfinite(r.change)
        else f"<li><code>{esc(r.key)}</code> only in one run</li>"
        for r in marked
    )
    marked_items = marked_items or "<li class=muted>none</li>"
    headers = [
        ("", False),
        ("key", False),
        ("baseline", True),
        ("this run", True),
        ("change", True),
        ("process", True),
        ("noise", True),
    ]
    body = f"""
<h1>sf profile diff</h1>
<div class="muted">this run <code>{esc(comparison.run)}</code> · baseline <code>{esc(comparison.baseline)}</code></div>
<div class="hero">
  <div class="card">
    <p class="verdict">{esc(headline)}</p>
    <p>{len(marked)} of {len(comparison.rows)} keys changed</p>
    <p class="why">beyond run-to-run noise (marked *: the change exceeds twice the noise and 15 %, the key takes
    at least 2 % of its component's time, and its share of that time moved by at least 5 %). Waits are listed, never
    marked: a wait per frame moves whenever anything else does.</p>
    <p>Verdicts: this run <b>{esc(advise(run).headline())}</b> · baseline <b>{esc(advise(baseline).headline())}</b></p>
  </div>
  <div class="card">
    <h3 style="margin-top:0">Marked keys</h3>
    <ul>{marked_items}</ul>
    <p class="muted">Reports of each run: <a href="report.html">this run</a> ·
    <a href="{esc(Path(comparison.baseline).resolve().as_uri())}/profiling/report.html">baseline</a></p>
  </div>
</div>
<h2>Largest changes</h2>
<p class="muted">Red: beyond noise. Grey band: twice the key's noise around zero.</p>
{diff_chart(comparison.rows)}
<h2>Every key</h2>
{table(headers, rows)}
"""
    return page(f"sf profile diff: {len(marked)} keys changed", body)


def write_compare_page(comparison, run: Experiment, baseline: Experiment, path: Path) -> Path:
    path.write_text(compare_page(comparison, run, baseline))
    return path
