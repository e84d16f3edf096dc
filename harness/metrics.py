"""Prometheus text from `/metrics` → series, and counter deltas over one point.

A hit rate over a run is a difference of counters, never a gauge. A labelled counter appears only
after its first increment, so a series absent before the point counts from zero; a counter that
went down (a server restart) is flagged and gives no delta.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

_SAMPLE = re.compile(
    r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+\S+)?\s*$"
)
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_TYPE = re.compile(r"^#\s*TYPE\s+(\S+)\s+(\S+)")
_SUFFIXES = ("_total", "_count", "_sum", "_bucket", "_created")

Labels = tuple[tuple[str, str], ...]


def _unescape(v: str) -> str:
    return v.replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")


def series_key(name: str, labels: Labels) -> str:
    """Canonical text of one series, e.g. `sglang:cached_tokens_total{cache_source="host"}`."""
    if not labels:
        return name
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}"


@dataclass
class Scrape:
    """One `/metrics` text: value per (name, labels), the declared type per family, unreadable lines."""

    values: dict[tuple[str, Labels], float] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)
    bad_lines: int = 0

    def type_of(self, name: str) -> str | None:
        if name in self.types:
            return self.types[name]
        for s in _SUFFIXES:
            if name.endswith(s) and name[: -len(s)] in self.types:
                return self.types[name[: -len(s)]]
        return None

    def is_counter(self, name: str) -> bool:
        """Counters and the monotone parts of histograms/summaries; `_created` stamps are not counted."""
        if name.endswith("_created"):
            return False
        t = self.type_of(name)
        if t == "counter":
            return True
        if t in ("histogram", "summary"):
            return name.endswith(("_count", "_sum", "_bucket"))
        return t is None and name.endswith("_total")

    def get(self, name: str, **labels: str) -> float | None:
        """Sum of the series of `name` whose labels include `labels` (None when there is none)."""
        hits = [v for (n, ls), v in self.values.items() if n == name and _matches(ls, labels)]
        return sum(hits) if hits else None


def _matches(labels: Labels, want: dict[str, str]) -> bool:
    d = dict(labels)
    return all(d.get(k) == v for k, v in want.items())


def parse_prometheus(text: str) -> Scrape:
    """Parse the Prometheus text exposition format; unreadable lines are counted, not fatal."""
    out = Scrape()
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            m = _TYPE.match(line)
            if m:
                out.types[m.group(1)] = m.group(2)
            continue
        m = _SAMPLE.match(line)
        if not m:
            out.bad_lines += 1
            continue
        try:
            value = float(m.group("value"))
        except ValueError:
            out.bad_lines += 1
            continue
        labels: list[tuple[str, str]] = []
        if m.group("labels"):
            text_labels = m.group("labels")
            pos = 0
            for lm in _LABEL.finditer(text_labels):
                if lm.start() != pos:
                    break
                labels.append((lm.group(1), _unescape(lm.group(2))))
                pos = lm.end()
            if text_labels[pos:].strip():
                out.bad_lines += 1
                continue
        out.values[(m.group("name"), tuple(sorted(labels)))] = value
    return out


@dataclass
class CounterDeltas:
    """Per counter series: after − before (None when the counter went down), and why anything is odd."""

    deltas: dict[tuple[str, Labels], float | None] = field(default_factory=dict)
    appeared: list[str] = field(default_factory=list)  # absent before: counted from zero
    went_down: list[str] = field(default_factory=list)  # after < before: restart, no delta
    vanished: list[str] = field(default_factory=list)  # present before, absent after: restart

    @property
    def reset(self) -> bool:
        return bool(self.went_down or self.vanished)

    def total(self, name: str, **labels: str) -> float | None:
        """Sum of the deltas of `name` over series whose labels include `labels`.

        None when no such series exists or one of them went down. Duplicate ranks of a tensor-parallel
        server (a `tp_rank` label with several values) count once: only the lowest rank is kept.
        """
        rows = [(ls, d) for (n, ls), d in self.deltas.items() if n == name and _matches(ls, labels)]
        tp = {r for ls, _ in rows if (r := dict(ls).get("tp_rank")) is not None}
        if len(tp) > 1:
            keep = min(tp, key=lambda r: (len(r), r))
            rows = [(ls, d) for ls, d in rows if dict(ls).get("tp_rank") in (None, keep)]
        if not rows or any(d is None for _, d in rows):
            return None
        return float(sum(d for _, d in rows if d is not None))

    def to_dict(self) -> dict[str, Any]:
        return {
            "deltas": {series_key(n, ls): d for (n, ls), d in sorted(self.deltas.items())},
            "appeared": self.appeared,
            "went_down": self.went_down,
            "vanished": self.vanished,
        }


def counter_deltas(before: Scrape, after: Scrape) -> CounterDeltas:
    """Counter increments between two scrapes of the same server."""
    out = CounterDeltas()
    for key, a in after.values.items():
        name = key[0]
        if not (after.is_counter(name) or before.is_counter(name)):
            continue
        if math.isnan(a):
            continue
        b = before.values.get(key)
        if b is None:
            out.deltas[key] = a
            out.appeared.append(series_key(*key))
        elif a < b:
            out.deltas[key] = None
            out.went_down.append(series_key(*key))
        else:
            out.deltas[key] = a - b
    for key in before.values:
        if key not in after.values and before.is_counter(key[0]):
            out.vanished.append(series_key(*key))
    return out


# SGLang's counter names (docs/sglang-facts.md), for the hit rate over a point.
PROMPT = "sglang:prompt_tokens_total"
CACHED = "sglang:cached_tokens_total"
GENERATION = "sglang:generation_tokens_total"
REQUESTS = "sglang:num_requests_total"
EVICTED = "sglang:evicted_tokens_total"
LOAD_BACK = "sglang:load_back_tokens_total"
# HiCache's (0.5.23, with --enable-hierarchical-cache): device->host backups, and host copies dropped
HICACHE_BACKUP_TOKENS = "sglang:hicache_backup_tokens_total"
HICACHE_BACKUP_BYTES = "sglang:hicache_backup_bytes_total"
HICACHE_DROPPED = "sglang:hicache_dropped_tokens_total"
STORAGE_BACKUPED = "sglang:backuped_tokens_total"  # host -> L3 writes (SGLang's spelling)

# canonical counter -> SGLang's metric name (its adapter's `metric_names`)
SGLANG_NAMES = {
    "prompt_tokens": PROMPT,
    "cached_tokens": CACHED,
    "generation_tokens": GENERATION,
    "requests": REQUESTS,
    "evicted_tokens": EVICTED,
    "load_back_tokens": LOAD_BACK,
}


def _label_values(deltas: Iterable[tuple[str, Labels]], name: str, label: str) -> list[str]:
    vals = {dict(ls).get(label) for n, ls in deltas if n == name}
    return sorted(v for v in vals if v is not None)
