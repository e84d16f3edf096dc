"""`harness parse-log FILE [--json]`: what an SGLang log says about batches, pools and cache hits."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from harness import serverlog
from harness.engines import logs
from harness.errors import HarnessError


def build_parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog, description="Parse an SGLang server log into records and a summary."
    )
    p.add_argument("file", type=Path, help="server.log (any SGLang version 0.4.10-0.5.23)")
    p.add_argument("--json", action="store_true", help="one JSON object per record, then one summary object")
    p.add_argument("--summary-only", action="store_true", help="print only the summary")
    return p


def log_summary(log: serverlog.ParsedLog) -> dict[str, Any]:
    """Lines by kind, pool sizes and prefill token totals: the figures a reader checks first."""
    walls = [r.wall for r in log.records if r.wall is not None]
    return {
        "file": log.path,
        "lines": log.lines,
        "by_kind": log.counts(),
        "undecodable_lines": log.undecodable,
        "pool": serverlog.pool_sizes(log.records),
        "prefill": serverlog.prefill_totals(log.records),
        "first_wall": min(walls) if walls else None,
        "last_wall": max(walls) if walls else None,
    }


def _text(rec: serverlog.LogRecord) -> str:
    fields = " ".join(f"{k}={v}" for k, v in rec.fields.items())
    ranks = "".join(f" {k}{v}" for k, v in rec.ranks.items())
    return f"{rec.lineno:>7} {rec.kind:<16}{ranks} {fields}"


def run(args: argparse.Namespace) -> int:
    path: Path = args.file
    if not path.is_file():
        raise HarnessError(f"{path}: no such log file")
    try:
        log = logs.parse_file(path)
    except OSError as e:
        raise HarnessError(f"{path}: cannot read ({e.strerror})") from None
    summary = log_summary(log)
    recognised = sum(v for k, v in summary["by_kind"].items() if k != "unknown")
    if args.json:
        if not args.summary_only:
            for rec in log.records:
                print(json.dumps(rec.to_dict(), separators=(",", ":")))
        print(json.dumps({"summary": summary}, separators=(",", ":")))
        return 0 if recognised else _none_found(path, summary)
    if not args.summary_only:
        for rec in log.records:
            print(_text(rec))
    pre = summary["prefill"]
    pool = summary["pool"]
    kinds = ", ".join(f"{k} {v}" for k, v in summary["by_kind"].items())
    print(f"{path}: {summary['lines']} lines: {kinds}")
    print(
        f"pool: device {pool['device_tokens']} tokens, max_total_num_tokens {pool['max_total_num_tokens']}, "
        f"host {pool['host_tokens']} tokens / {pool['host_gb']} GB"
    )
    rate = f"{pre['hit_rate']:.2%}" if pre["hit_rate"] is not None else "n/a"
    print(
        f"prefill: {pre['prefill_lines']} lines, new {pre['new_tokens']} tokens, "
        f"cached {pre['cached_tokens']} tokens, hit rate {rate}"
    )
    return 0 if recognised else _none_found(path, summary)


def _none_found(path: Path, summary: dict) -> int:
    """A file with no server line in it is not a server log: say so, exit 1 (it is not bad input)."""
    print(
        f"{path}: no {logs.DIALECTS} server log lines among {summary['lines']} lines "
        "(is this the server's log?)",
        file=sys.stderr,
    )
    return 1
