"""Aggregate repeated framework runs (medians) and render the comparison as markdown.

Ratio columns are oriented so that >1 always means regency is better: ``regency/peer`` for
throughput metrics (``*_per_s``) and ``peer/regency`` for costs (latency, seconds, MiB).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from benchmarks._common import higher_is_better
from benchmarks._launch import FrameworkRun, Outcome

HIDDEN_METRICS = {"median_s"}  # kept in the JSON, left out of the table
MISSING = "—"


def fmt(value: float) -> str:
    """A short human number: 3 significant digits, thousands separators for big ones."""
    mag = abs(value)
    if mag >= 1000:
        return f"{value:,.0f}"
    if mag >= 100:
        return f"{value:.0f}"
    if mag >= 10:
        return f"{value:.1f}"
    if mag >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def _outcomes(runs: Sequence[FrameworkRun], workload: str) -> list[Outcome]:
    return [r.outcomes[workload] for r in runs if workload in r.outcomes]


def median_of(runs: Sequence[FrameworkRun], workload: str, metric: str) -> float | None:
    values = [
        o.metrics[metric]
        for o in _outcomes(runs, workload)
        if o.status == "ok" and metric in o.metrics
    ]
    return statistics.median(values) if values else None


def cell(runs: Sequence[FrameworkRun], workload: str, metric: str) -> str:
    outcomes = _outcomes(runs, workload)
    if not outcomes:
        return "not run"
    value = median_of(runs, workload, metric)
    failed = [o for o in outcomes if o.status != "ok"]
    if value is None:
        return "/".join(sorted({o.status for o in failed})) or MISSING
    ok = len(outcomes) - len(failed)
    return fmt(value) + (f" ({ok}/{len(outcomes)} ok)" if failed else "")


def ratio(regency: float | None, peer: float | None, metric: str) -> str:
    if not regency or not peer:
        return MISSING
    r = regency / peer if higher_is_better(metric) else peer / regency
    return f"{r:.2f}"


def metrics_of(by_fw: dict[str, list[FrameworkRun]], workload: str) -> list[str]:
    """Metric names reported for ``workload`` by any framework, in first-seen order."""
    names: dict[str, None] = {}
    for runs in by_fw.values():
        for outcome in _outcomes(runs, workload):
            names.update(dict.fromkeys(m for m in outcome.metrics if m not in HIDDEN_METRICS))
    return list(names) or [MISSING]


def render_table(
    by_fw: dict[str, list[FrameworkRun]], workloads: Sequence[str], peers: Sequence[str]
) -> str:
    columns = ["regency", *peers]
    header = ["workload", "metric", *columns, *(f"regency/{p}" for p in peers)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for w in workloads:
        for m in metrics_of(by_fw, w):
            cells = [cell(by_fw.get(fw, []), w, m) for fw in columns]
            reg = median_of(by_fw.get("regency", []), w, m)
            ratios = [ratio(reg, median_of(by_fw.get(p, []), w, m), m) for p in peers]
            lines.append("| " + " | ".join([w, m, *cells, *ratios]) + " |")
    return "\n".join(lines)


def failure_notes(by_fw: dict[str, list[FrameworkRun]]) -> list[str]:
    notes: dict[str, None] = {}
    for fw, runs in by_fw.items():
        for i, run in enumerate(runs, 1):
            for w, o in run.outcomes.items():
                if o.status != "ok":
                    first = o.detail.strip().splitlines()[0][:300] if o.detail.strip() else ""
                    notes[f"- {fw} / {w} (run {i}): **{o.status}** — {first}"] = None
    return list(notes)


def versions_line(by_fw: dict[str, list[FrameworkRun]]) -> str:
    parts = []
    for fw, runs in by_fw.items():
        info = next((r.info for r in runs if r.info), {})
        if info:
            parts.append(f"{fw} {info.get('version', '?')} (Python {info.get('python', '?')})")
    return ", ".join(parts) or "unknown"


def render_report(
    by_fw: dict[str, list[FrameworkRun]],
    workloads: Sequence[str],
    peers: Sequence[str],
    meta: dict[str, Any],
) -> str:
    caption = (
        f"Medians of {meta['repeat']} interleaved runs per framework "
        f"({'quick' if meta['quick'] else 'full'} suite), {meta['date']}, "
        f"{meta['cpus']} CPUs ({meta['machine']}), "
        f"{meta.get('load', 0)} CPU-bound processes beside it (--load). "
        f"Versions: {versions_line(by_fw)}.\n\n"
        "**Ratio columns: >1 means regency is better** (`*_per_s` throughput: regency/peer; "
        "latency, seconds and MiB: peer/regency). `(k/n ok)` after a value: only k of n runs "
        "succeeded; `timeout`/`error`: no run succeeded (see notes)."
    )
    parts = [caption, "", render_table(by_fw, workloads, peers)]
    notes = failure_notes(by_fw)
    if notes:
        parts += ["", "Failures:", "", *notes]
    return "\n".join(parts) + "\n"


def to_json(
    by_fw: dict[str, list[FrameworkRun]], workloads: Sequence[str], meta: dict[str, Any]
) -> dict[str, Any]:
    medians = {
        fw: {w: {m: median_of(runs, w, m) for m in metrics_of(by_fw, w)} for w in workloads}
        for fw, runs in by_fw.items()
    }
    runs = {
        fw: [
            {"info": r.info, "outcomes": {w: asdict(o) for w, o in r.outcomes.items()}} for r in rs
        ]
        for fw, rs in by_fw.items()
    }
    return {"meta": meta, "medians": medians, "runs": runs}
