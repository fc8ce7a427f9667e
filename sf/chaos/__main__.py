"""`python -m sf.chaos`: the injection matrix (see `sf.chaos`)."""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
from dataclasses import asdict
from pathlib import Path

from sf.chaos.faults import FAULTS
from sf.chaos.trial import FAMILIES, TrialResult, run_trial

COLUMNS = ("#", "env", "fault", "target", "at s", "healed s", "end s", "exit", "status", "left", "shm", "ckpt before",
           "ckpt after", "resumed", "error / problems")  # fmt: skip


def plan(runs: int, families: list[str], faults: list[str], seed: int) -> list[tuple[str, str]]:
    """(family, fault) of each run: every fault in turn, each on a family drawn at random among those it applies to."""
    rng = random.Random(seed)
    chosen = []
    for i in range(runs):
        fault = FAULTS[faults[i % len(faults)]]
        usable = [f for f in families if (f == "doom" or not fault.doom_only) and (f == "pbt") == fault.in_replacement]
        if not usable:
            continue
        chosen.append((rng.choice(usable), fault.name))
    return chosen


def format_table(results: list[TrialResult]) -> str:
    rows = [COLUMNS]
    for r in results:
        rows.append(
            (
                str(r.index),
                r.family,
                r.fault,
                r.target,
                "-" if r.at_s is None else f"{r.at_s:.1f}",
                "-" if r.healed_s is None else f"{r.healed_s:.1f}",
                "-" if r.end_s is None else f"{r.end_s:.1f}",
                "-" if r.exit_code is None else str(r.exit_code),
                r.status or "-",
                str(len(r.processes_left)),
                str(len(r.shm_left)),
                _short(r.checkpoint_before),
                _short(r.checkpoint_after),
                r.resumed_from or "-",
                "; ".join(r.problems) if r.problems else (r.error or ""),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS) - 1)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1] for row in rows]
    return "\n".join(line.rstrip() for line in lines)


def format_by_fault(results: list[TrialResult]) -> str:
    """One line per fault: how many runs (per env), how many healed and the slowest to, the slowest end, what was left,
    lost or touched, how many failed."""
    rows = [
        ("fault", "runs", "cartpole", "doom", "pbt", "healed", "slowest heal s", "slowest end s", "processes left",
         "shm left", "lost", "foreign removed", "failed")
    ]  # fmt: skip
    for fault in dict.fromkeys(r.fault for r in results):
        runs = [r for r in results if r.fault == fault]
        ends = [r.end_s for r in runs if r.end_s is not None]
        heals = [r.healed_s for r in runs if r.healed_s is not None]
        rows.append(
            (
                fault,
                str(len(runs)),
                str(sum(r.family == "cartpole" for r in runs)),
                str(sum(r.family == "doom" for r in runs)),
                str(sum(r.family == "pbt" for r in runs)),
                str(len(heals)),
                f"{max(heals):.1f}" if heals else "-",
                f"{max(ends):.1f}" if ends else "-",
                str(sum(len(r.processes_left) for r in runs)),
                str(sum(len(r.shm_left) for r in runs)),
                str(sum(any(p.startswith("checkpoint lost") for p in r.problems) for r in runs)),
                str(sum(len(r.foreign_removed) for r in runs)),
                str(sum(not r.ok for r in runs)),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


def _short(name: str | None) -> str:
    """checkpoint_000000012_24576.pth -> v12"""
    if not name:
        return "-"
    return f"v{int(name.split('_')[1])}"


def summary_line(results: list[TrialResult]) -> str:
    failed = [r for r in results if not r.ok]
    ends = [r.end_s for r in results if r.end_s is not None]
    worst = f", slowest end {max(ends):.1f} s" if ends else ""
    processes = sum(len(r.processes_left) for r in results)
    files = sum(len(r.shm_left) for r in results)
    healed = sum(r.healed_s is not None for r in results)
    foreign = sum(len(r.foreign_removed) for r in results)
    return (
        f"{len(results)} faults, {len(failed)} failed{worst}, {healed} healed; processes left {processes}, "
        f"/dev/shm left {files}, files of other programs removed {foreign}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sf.chaos",
        description="Short parallel training runs, one fault each at a random moment; a table of how each ended "
        "(or healed: rollout workers, their engines and inference workers are restarted and training goes on). "
        "Exits 1 on any hang, leftover process or /dev/shm file, lost checkpoint, unclear error, failed resume, run "
        "that did not heal, or file of another program removed.",
    )
    parser.add_argument("--runs", type=int, default=20, help="number of runs (each fault in turn)")
    parser.add_argument(
        "--families",
        default="cartpole,doom,pbt",
        help="comma-separated: cartpole, doom, pbt (a population whose faults hit during a weight copy)",
    )
    parser.add_argument("--faults", default=",".join(FAULTS), help=f"comma-separated, of: {', '.join(FAULTS)}")
    parser.add_argument("--seed", type=int, default=0, help="draws the families, targets and moments")
    parser.add_argument("--heartbeat_timeout_sec", type=int, default=5, help="of the runs (the SIGSTOP fault waits it)")
    parser.add_argument("--max_delay_s", type=float, default=4.0, help="the fault hits up to this long after its "
                        "target started (and the checkpoints it needs exist)")  # fmt: skip
    parser.add_argument("--train_dir", default="train_dir/chaos", help="where the runs write; a failed run's folder "
                        "(its log included) is kept, a passed one removed")  # fmt: skip
    parser.add_argument("--keep", action="store_true", help="keep the folders of runs that passed too")
    parser.add_argument("--json", default=None, help="also write every record to this file")
    args = parser.parse_args(argv)
    families = [f for f in args.families.split(",") if f]
    faults = [f for f in args.faults.split(",") if f]
    unknown = [f for f in families if f not in FAMILIES] + [f for f in faults if f not in FAULTS]
    if unknown:
        parser.error(f"unknown: {', '.join(unknown)}")
    if "doom" in families:
        try:
            import vizdoom  # noqa: F401
        except ImportError:
            parser.error("--families=doom needs vizdoom: pip install 'sf[vizdoom]'")
    logging.getLogger("sf").setLevel(logging.ERROR)  # checkpoint warnings are the trials' business, not this log's
    runs = plan(args.runs, families, faults, args.seed)
    rng = random.Random(args.seed + 1)
    results = []
    train_dir = Path(args.train_dir).resolve()
    for index, (family, fault) in enumerate(runs):
        result = run_trial(
            index, family, FAULTS[fault], rng, train_dir, args.heartbeat_timeout_sec, args.max_delay_s, args.keep
        )
        results.append(result)
        print(
            f"[{index + 1}/{len(runs)}] {family} {fault} -> {'ok' if result.ok else '; '.join(result.problems)}",
            flush=True,
        )
    print(format_table(results))
    print()
    print(format_by_fault(results))
    print(summary_line(results))
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in results], indent=2))
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
