#!/usr/bin/env python3
"""`make docs`: the committed sample (docs/sample/) and its page, docs/sample.md, from one summary.

Writes docs/sample/<node>.json + its report (Markdown, charts), and rewrites docs/sample.md (which the README
links to as a first result) between
`<!-- sample:begin -->` and `<!-- sample:end -->`: the machine, that it is one run, the tables with each
figure's seed spread, the findings computed from the summary (harness.report.findings) and, given a second
run of the same command (`--repeat`), how far the two runs differ (how much the sim depends on machine load).

    .venv/bin/python scripts/docs_sample.py summaries/cpu-sim.json [--repeat summaries/cpu-sim-repeat.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.report import write_report
from harness.report.common import load_summary, server_policy, server_pool, sort_key
from harness.report.findings import findings
from harness.summary import parse_summary

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- sample:begin -->", "<!-- sample:end -->"
VERDICT_BEGIN, VERDICT_END = "<!-- verdict:begin -->", "<!-- verdict:end -->"
VERDICT_PAGES = (
    "README.md",
    "docs/reading-results.md",
)  # quote the sample's verdict line between those markers


def _seed_values(p: dict[str, Any], get: Any) -> list[float]:
    out = []
    for s in (p.get("seeds") or {}).values():
        if s.get("status") == "ok":
            v = get(s.get("figures") or {})
            if isinstance(v, int | float):
                out.append(float(v))
    return out


def _modelled_ttft(f: dict[str, Any]) -> Any:
    return ((f.get("modelled") or {}).get("ttft_ms") or {}).get("p50")


def _wall_ttft(f: dict[str, Any]) -> Any:
    v = f.get("ttft_median_s")
    return v * 1000 if isinstance(v, int | float) else None


def _ms_cell(vals: list[float]) -> str:
    if not vals:
        return "n/a"
    vals = sorted(vals)
    med = vals[len(vals) // 2] if len(vals) % 2 else (vals[len(vals) // 2 - 1] + vals[len(vals) // 2]) / 2
    same = f"{vals[0]:,.0f}" == f"{vals[-1]:,.0f}"
    return f"{med:,.0f} ({vals[0]:,.0f}–{vals[-1]:,.0f})" if len(vals) > 1 and not same else f"{med:,.0f}"


def _pct_cell(vals: list[float]) -> str:
    if not vals:
        return "n/a"
    vals = sorted(vals)
    med = vals[len(vals) // 2] if len(vals) % 2 else (vals[len(vals) // 2 - 1] + vals[len(vals) // 2]) / 2
    same = f"{vals[0]:.1%}" == f"{vals[-1]:.1%}"
    return f"{med:.1%} ({vals[0]:.1%}–{vals[-1]:.1%})" if len(vals) > 1 and not same else f"{med:.1%}"


def ab_lines(points: list[dict[str, Any]]) -> list[str]:
    """groups | prompt tokens | TTFT per server: median (min–max over seeds)."""
    servers = sorted({p["server"] for p in points})
    modelled = all(p.get("modelled") for p in points)
    get = _modelled_ttft if modelled else _wall_ttft
    what = "modelled median TTFT ms" if modelled else "median TTFT ms (wall clock)"
    out = [
        f"| groups | prompt tokens to keep | {' | '.join(f'{what}, {s}' for s in servers)} |",
        "|---|---|" + "---|" * len(servers),
    ]
    by_g: dict[Any, dict[str, dict[str, Any]]] = {}
    for p in points:
        by_g.setdefault(p["sweep"].get("groups"), {})[p["server"]] = p
    for g in sorted(by_g, key=sort_key):
        per = by_g[g]
        keep = next(iter(per.values())).get("prompt_tokens_to_keep")
        cells = [_ms_cell(_seed_values(per[s], get)) if s in per else "—" for s in servers]
        out.append(
            f"| {g} | {keep:,} | {' | '.join(cells)} |" if keep else f"| {g} | n/a | {' | '.join(cells)} |"
        )
    return out


def policy_lines(points: list[dict[str, Any]], servers: dict[str, Any]) -> list[str]:
    """pool | policy | whole run | turn 1..T: median (min–max over seeds)."""
    turns = sorted({int(t) for p in points for t in (p["median"].get("hit_rate_usage_by_turn") or {})})
    out = [
        "| pool (tokens) | policy | whole-run hit rate | "
        + " | ".join(f"turn {t + 1}" for t in turns)
        + " |",
        "|---|---|---|" + "---|" * len(turns),
    ]
    rows = sorted(
        points,
        key=lambda p: (
            sort_key(int(x) if (x := server_pool(servers.get(p["server"], {}))).isdigit() else x),
            server_policy(servers.get(p["server"], {})),
        ),
    )
    for p in rows:
        entry = servers.get(p["server"], {})
        whole = _pct_cell(_seed_values(p, lambda f: f.get("hit_rate_usage")))
        cells = [
            _pct_cell(_seed_values(p, lambda f, t=t: (f.get("hit_rate_usage_by_turn") or {}).get(str(t))))
            for t in turns
        ]
        out.append(f"| {server_pool(entry)} | {server_policy(entry)} | {whole} | {' | '.join(cells)} |")
    return out


def generic_lines(points: list[dict[str, Any]]) -> list[str]:
    """server | point | whole-run hit rate | median TTFT (modelled where the sim gave it)."""
    modelled = all(p.get("modelled") for p in points)
    get = _modelled_ttft if modelled else _wall_ttft
    what = "modelled median TTFT ms" if modelled else "median TTFT ms (wall clock)"
    out = [f"| server | point | whole-run hit rate | {what} |", "|---|---|---|---|"]
    for p in sorted(points, key=lambda p: (p["server"], [sort_key(v) for v in p["sweep"].values()])):
        hit = _pct_cell(_seed_values(p, lambda f: f.get("hit_rate_usage")))
        out.append(f"| {p['server']} | {p['point_key']} | {hit} | {_ms_cell(_seed_values(p, get))} |")
    return out


def repeat_lines(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """How far a second run of the same command on the same machine moved each figure."""
    bmap = {(p["experiment"], p["server"], p["point_key"]): p for p in b["points"]}
    hit, ttft = [], []
    for p in a["points"]:
        q = bmap.get((p["experiment"], p["server"], p["point_key"]))
        if not q:
            continue
        ha, hb = p["median"].get("hit_rate_usage"), q["median"].get("hit_rate_usage")
        if isinstance(ha, int | float) and isinstance(hb, int | float):
            hit.append((abs(ha - hb) * 100, f"{p['server']} {p['point_key']}"))
        ma, mb = _modelled_ttft(p), _modelled_ttft(q)
        if not isinstance(ma, int | float):
            ma, mb = _wall_ttft(p["median"]), _wall_ttft(q["median"])
        if isinstance(ma, int | float) and isinstance(mb, int | float) and min(ma, mb) > 0:
            ttft.append((max(ma, mb) / min(ma, mb), f"{p['server']} {p['point_key']}"))
    if not hit:
        return []
    h, hw = max(hit)
    t, tw = max(ttft) if ttft else (1.0, "")
    if h < 0.05 and t < 1.005:
        return [
            f"A second run of the same command on the same machine reproduced every figure (hit rates within "
            f"{h:.2f} points, median TTFT within {(t - 1) * 100:.1f} %): the sim's figures come from its own "
            "clock, so they do not depend on how busy this machine was. Its wall-clock figures (in the full "
            "report) do."
        ]
    parts = [f"hit rates by up to {h:.1f} points ({hw})"]
    if ttft:
        parts.append(f"median TTFT by up to {(t - 1) * 100:.0f} % ({tw})")
    return [
        f"A second run of the same command on the same machine moved {' and '.join(parts)}: how busy the "
        "machine is changes when requests reach the sim, hence which prompts meet in the pool. Read "
        "differences smaller than that as noise."
    ]


def _machine(summary: dict[str, Any]) -> str:
    for entry in (summary.get("experiments") or {}).values():
        m = entry.get("manifest") or {}
        cpu = m.get("cpu") or {}
        bench = m.get("bench") or {}
        gpus = m.get("gpus") or []
        where = f"{cpu.get('count', '?')} × {cpu.get('model', 'unknown CPU')}"
        gpu = f", {len(gpus)} GPU(s)" if gpus else ", no GPU"
        kind = bench.get("server_kind")
        sim = (
            f"; servers: the embedded sim modelling the {bench.get('card_profile')} card at --time-scale "
            f"{bench.get('time_scale')}"
            if kind == "sim"
            else ""
        )
        return f"{where}{gpu}{sim}"
    return "unknown machine"


def section(summary: dict[str, Any], repeat: dict[str, Any] | None, rel: str, out: Path) -> str:
    """The sample section: machine and run, then per experiment its findings, table and the charts in `out`
    (linked as `rel`, that folder relative to the page)."""
    node = summary.get("node", "?")
    seeds = sorted({s for p in summary["points"] for s in (p.get("seeds") or {})}, key=sort_key)
    lines = [
        f"One run of `make bench NODE={node}` ({summary.get('generated_at', '?')[:10]}) on {_machine(summary)}. "
        f"Each cell is the median over seeds {', '.join(seeds)}, with the min–max across those seeds in brackets "
        "where they differ (a seed changes the prompts' text, not the workload's shape). "
        f"The whole report: [{rel}/{node}.md]({rel}/{node}.md); the summary JSON beside it. "
        "Regenerate with `make docs`: these tables and sentences are written by `scripts/docs_sample.py` "
        "from that summary, never by hand.",
        "",
    ]
    said = findings(parse_summary(summary))
    for exp, entry in sorted((summary.get("experiments") or {}).items()):
        pts = [p for p in summary["points"] if p.get("experiment") == exp]
        servers = entry.get("servers") or {}
        lines += [f"**{exp}.** " + " ".join(said.get(exp) or ["(no finding computed)"]), ""]
        if any(p.get("workload_kind") == "multi-turn" for p in pts):
            lines += policy_lines(pts, servers)
        elif any("groups" in p.get("sweep", {}) for p in pts):
            lines += ab_lines(pts)
        else:
            lines += generic_lines(pts)
        lines.append("")
        for png in sorted(out.glob(f"{node}-{exp}-*.png")):
            lines += [f"![{png.stem}]({rel}/{png.name})", ""]
    if repeat is not None:
        lines += repeat_lines(summary, repeat) + [""]
    return "\n".join(lines).rstrip() + "\n"


def replace_section(doc: str, text: str, name: str = "docs/sample.md") -> str:
    if BEGIN not in doc or END not in doc:
        raise HarnessError(f"{name}: markers {BEGIN} / {END} not found")
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{text}{END}{tail}"


def verdict_block(line: str) -> str:
    """The sample's verdict line as the pages quote it (a code span)."""
    return f"{VERDICT_BEGIN}`{line}`{VERDICT_END}"


def rewrite_verdicts(line: str, root: Path = ROOT) -> list[Path]:
    """Every page's quoted verdict line, replaced by the sample's own, so the example cannot go stale."""
    out = []
    for rel in VERDICT_PAGES:
        page = root / rel
        doc = page.read_text(encoding="utf-8")
        if VERDICT_BEGIN not in doc or VERDICT_END not in doc:
            raise HarnessError(f"{page}: markers {VERDICT_BEGIN} / {VERDICT_END} not found")
        head, rest = doc.split(VERDICT_BEGIN, 1)
        _, tail = rest.split(VERDICT_END, 1)
        page.write_text(head + verdict_block(line) + tail, encoding="utf-8")
        out.append(page)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="docs_sample.py", description=__doc__.splitlines()[0])
    ap.add_argument("summary", type=Path, help="summaries/<node>.json of the default suite")
    ap.add_argument("--repeat", type=Path, help="a second run's summary (same command, same machine)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "sample")
    ap.add_argument(
        "--doc",
        "--readme",
        dest="doc",
        type=Path,
        default=ROOT / "docs" / "sample.md",
        help="the page with the markers",
    )
    args = ap.parse_args(argv)
    try:
        summary = load_summary(args.summary)
        repeat = load_summary(args.repeat) if args.repeat else None
        node = str(summary.get("node"))
        args.out.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(args.summary, args.out / f"{node}.json")
        written = write_report(summary, args.out, stem=node)
        rel = args.out.resolve().relative_to(args.doc.resolve().parent).as_posix()
        doc = args.doc.read_text(encoding="utf-8")
        args.doc.write_text(
            replace_section(doc, section(summary, repeat, rel, args.out), str(args.doc)), encoding="utf-8"
        )
        verdict = summary.get("verdict") or {}
        if isinstance(verdict, dict) and verdict.get("line"):
            rewrite_verdicts(str(verdict["line"]))
    except HarnessError as e:
        print(f"docs_sample: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps({"sample": [str(p) for p in written], "doc": str(args.doc)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
