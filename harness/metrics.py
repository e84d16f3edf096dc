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

# vLLM's (V1, seen on 0.32.0): prefix-cache queries and hits in tokens, prompt tokens by where they came
# from, and cache_config_info, a gauge whose labels carry the block size and the pool.
VLLM_QUERIES = "vllm:prefix_cache_queries_total"
VLLM_HITS = "vllm:prefix_cache_hits_total"
VLLM_EXTERNAL_HITS = "vllm:external_prefix_cache_hits_total"  # a KV connector (offloading, LMCache)
VLLM_PROMPT = "vllm:prompt_tokens_total"
VLLM_BY_SOURCE = (
    "vllm:prompt_tokens_by_source_total"  # source = local_cache_hit | local_compute | external_kv_transfer
)
VLLM_GENERATION = "vllm:generation_tokens_total"
VLLM_REQUESTS = "vllm:request_success_total"
VLLM_PREEMPTIONS = "vllm:num_preemptions_total"
VLLM_CACHE_CONFIG = "vllm:cache_config_info"

# canonical counter -> engine metric name, per engine (the adapters' `metric_names`)
SGLANG_NAMES = {
    "prompt_tokens": PROMPT,
    "cached_tokens": CACHED,
    "generation_tokens": GENERATION,
    "requests": REQUESTS,
    "evicted_tokens": EVICTED,
    "load_back_tokens": LOAD_BACK,
}
VLLM_NAMES = {
    "prompt_tokens": VLLM_QUERIES,
    "cached_tokens": VLLM_HITS,
    "generation_tokens": VLLM_GENERATION,
    "requests": VLLM_REQUESTS,
    "external_cached_tokens": VLLM_EXTERNAL_HITS,
    "preemptions": VLLM_PREEMPTIONS,
}


def counter_engine(names: Iterable[str]) -> str | None:
    """Which engine's counters a scrape holds ("sglang", "vllm"), from the names alone; None: neither."""
    seen = set(names)
    if VLLM_QUERIES in seen or VLLM_HITS in seen:
        return "vllm"
    if PROMPT in seen or CACHED in seen:
        return "sglang"
    return None


def cache_figures(d: CounterDeltas) -> dict[str, Any]:
    """Prompt and cached token deltas, their ratio, and the device/host/storage split when labelled.

    The engine is told by the counter names: SGLang's cached/prompt tokens, or vLLM's prefix-cache
    hits/queries (with the by-source prompt tokens as the split).
    """
    engine = counter_engine(n for n, _ in d.deltas)
    if engine == "vllm":
        return _vllm_figures(d)
    prompt = d.total(PROMPT)
    cached = d.total(CACHED)
    if cached is None and prompt is not None and not d.reset:
        cached = 0.0  # the labelled counter appears only after its first increment
    split: dict[str, float | None] = {}
    for src in _label_values(d.deltas, CACHED, "cache_source"):
        split[src] = d.total(CACHED, cache_source=src)
    return {
        "engine": engine,
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "cached_by_source": split,
        "hit_rate": (cached / prompt) if prompt and cached is not None else None,
        "requests": d.total(REQUESTS),
        "generation_tokens": d.total(GENERATION),
        "evicted_tokens": d.total(EVICTED),
        "load_back_tokens": d.total(LOAD_BACK),
        "hicache_backup_tokens": d.total(HICACHE_BACKUP_TOKENS),
        "hicache_backup_bytes": d.total(HICACHE_BACKUP_BYTES),
        "hicache_dropped_tokens": d.total(HICACHE_DROPPED),
        "reset": d.reset,
    }


def _vllm_figures(d: CounterDeltas) -> dict[str, Any]:
    """vLLM: hit rate = Δ prefix_cache_hits / Δ prefix_cache_queries (+ a connector's hits when present)."""
    queries, hits = d.total(VLLM_QUERIES), d.total(VLLM_HITS)
    external = d.total(VLLM_EXTERNAL_HITS)
    cached = None if hits is None else hits + (external or 0.0)
    split: dict[str, float | None] = {
        src: d.total(VLLM_BY_SOURCE, source=src)
        for src in _label_values(d.deltas, VLLM_BY_SOURCE, "source")
        if src != "local_compute"  # the tokens that were not cached
    }
    return {
        "engine": "vllm",
        "prompt_tokens": queries,
        "cached_tokens": cached,
        "cached_by_source": split,
        "hit_rate": (cached / queries) if queries and cached is not None else None,
        "requests": d.total(VLLM_REQUESTS),
        "generation_tokens": d.total(VLLM_GENERATION),
        "evicted_tokens": None,  # vLLM counts no evictions
        "load_back_tokens": external,
        "preemptions": d.total(VLLM_PREEMPTIONS),
        "reset": d.reset,
    }


TTFT_HISTOGRAMS = ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds")


def ttft_mean_s(d: CounterDeltas) -> tuple[float | None, float | None]:
    """(mean TTFT in s, requests) over the point from the server's own TTFT histogram (_sum / _count)."""
    for name in TTFT_HISTOGRAMS:
        total, count = d.total(name + "_sum"), d.total(name + "_count")
        if total is not None and count:
            return total / count, count
    return None, None


def vllm_cache_config(scrape: Scrape) -> dict[str, Any]:
    """Block size and pool from `vllm:cache_config_info` (labels of a gauge); {} when absent."""
    labels = next((dict(ls) for (n, ls) in scrape.values if n == VLLM_CACHE_CONFIG), None)
    if labels is None:
        return {}

    def num(key: str) -> int | float | None:
        v = labels.get(key)
        if v is None:
            return None
        try:
            f = float(v)
        except ValueError:
            return None
        return int(f) if f.is_integer() else f

    blocks = num("num_gpu_blocks")
    block_size = num("block_size")
    tokens = num("kv_cache_size_tokens")
    if tokens is None and isinstance(blocks, int) and isinstance(block_size, int):
        tokens = blocks * block_size
    return {
        "block_size": block_size,
        "num_blocks": blocks,
        "pool_tokens": tokens,
        "kv_cache_memory_bytes": num("kv_cache_memory_bytes"),
        "enable_prefix_caching": labels.get("enable_prefix_caching") == "True",
        "kv_offloading_backend": labels.get("kv_offloading_backend"),
        "kv_offloading_size": num("kv_offloading_size"),
        "cache_dtype": labels.get("cache_dtype"),
    }


def _label_values(deltas: Iterable[tuple[str, Labels]], name: str, label: str) -> list[str]:
    vals = {dict(ls).get(label) for n, ls in deltas if n == name}
    return sorted(v for v in vals if v is not None)
