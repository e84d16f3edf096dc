"""The server's own /metrics scraped on an interval during a point, into `<point>/metrics.jsonl`.

Why: two scrapes (before, after) cannot tell an evict storm from steady eviction, nor say when a stall
began. One line per source per tick, on the GPU sampler's clock (time.monotonic), with each watched
counter's value and its rate since the previous tick, and each watched gauge. Only the watched families
are parsed (a name lookup per line), so a tick costs little client CPU (benchmarks/bench_timeline.py).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import IO, Any

import httpx

from harness.capture.files import METRICS

METRICS_TIMELINE = METRICS  # one name, kept by the capture (moved aside on a re-run with the records)
DEFAULT_INTERVAL_S = 0.5


@dataclass(frozen=True)
class Watch:
    """Which samples of a /metrics page a timeline keeps, and under which field. Each engine's adapter
    declares its own names (`Adapter.timeline`); harness.engines merges them into TIMELINE_WATCH, which
    the sweep hands in (telemetry sits below engines and names none). Engines' names for the same thing
    share a field, so a chart reads one field whatever ran."""

    counters: Mapping[str, str] = field(default_factory=dict)  # sample name -> field; a rate per tick
    gauges: Mapping[str, str] = field(default_factory=dict)  # sample name -> field
    # a counter split by one label into a field per value: name -> (label, field prefix, values with a rate)
    split: Mapping[str, tuple[str, str, tuple[str, ...]]] = field(default_factory=dict)

    @cached_property
    def fields(self) -> dict[str, str]:
        return {**self.counters, **self.gauges}

    @cached_property
    def counter_fields(self) -> frozenset[str]:
        """The fields a rate is written for."""
        split = {prefix + v for _label, prefix, values in self.split.values() for v in values}
        return frozenset(self.counters.values()) | split

    def merged(self, other: Watch) -> Watch:
        """Both tables in one; a sample name two engines map to different fields is an error."""
        for mine, theirs in (
            (self.counters, other.counters),
            (self.gauges, other.gauges),
            (self.split, other.split),
        ):
            clash = sorted(n for n in mine.keys() & theirs.keys() if mine[n] != theirs[n])
            if clash:
                raise ValueError(f"timeline: {', '.join(clash)} watched as two different fields")
        return Watch(
            {**self.counters, **other.counters},
            {**self.gauges, **other.gauges},
            {**self.split, **other.split},
        )


def watched_values(text: str, watch: Watch) -> dict[str, float]:
    """The watched series of one /metrics text, summed per field; a tensor-parallel rank other than 0
    is skipped (its counters repeat rank 0's)."""
    out: dict[str, float] = {}
    fields, split = watch.fields, watch.split
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        brace = line.find("{")
        space = line.find(" ")
        end = brace if 0 <= brace < space or (brace >= 0 and space < 0) else space
        if end <= 0:
            continue
        name = line[:end]
        fld = fields.get(name)
        by = split.get(name) if fld is None else None
        if fld is None and by is None:
            continue
        rest = line
        if brace == end:
            close = line.rfind("}")
            labels, rest = line[brace:close], line[close + 1 :]
            if 'tp_rank="' in labels and 'tp_rank="0"' not in labels:
                continue
            if by is not None:
                key = by[0] + '="'
                i = labels.find(key)
                if i < 0:
                    continue
                i += len(key)
                fld = by[1] + labels[i : labels.find('"', i)]
        else:
            rest = line[end:]
        parts = rest.split()
        if not parts or fld is None:
            continue
        try:
            v = float(parts[0])
        except ValueError:
            continue
        out[fld] = out.get(fld, 0.0) + v
    return out


@dataclass
class _Source:
    name: str
    url: str
    last: dict[str, float] = field(default_factory=dict)
    last_t: float | None = None
    off: bool = False  # answered 404: metrics are not enabled there (SGLang without --enable-metrics)


class Timeline:
    """A thread that scrapes each source every `interval_s` and appends one line per source per tick."""

    def __init__(
        self,
        out: IO[str],
        sources: Mapping[str, str],
        interval_s: float,
        headers: Mapping[str, str] | None = None,
        *,
        watch: Watch,
    ) -> None:
        self.out = out
        self.watch = watch
        self.sources = [_Source(n, u.rstrip("/") + "/metrics") for n, u in sources.items()]
        self.interval_s = interval_s
        self.headers = dict(headers or {})
        self.stop_event = threading.Event()
        self.ticks = 0
        self.thread = threading.Thread(target=self._run, name="metrics-timeline", daemon=True)

    def _write(self, obj: dict[str, Any]) -> None:
        if self.out.closed:  # the point's block ended (a stop signal cut its join short): nothing to add
            return
        self.out.write(json.dumps(obj, separators=(",", ":")) + "\n")
        self.out.flush()

    def _tick(self, client: httpx.Client) -> None:
        for s in self.sources:
            if s.off:
                continue
            t_mono, t_wall = time.monotonic(), time.time()
            line: dict[str, Any] = {"kind": "sample", "t_mono": t_mono, "t_wall": t_wall, "source": s.name}
            try:
                r = client.get(s.url)
                if r.status_code == 404:
                    s.off = True
                if r.status_code != 200:
                    raise httpx.HTTPError(f"HTTP {r.status_code}")
                values = watched_values(r.text, self.watch)
            except httpx.HTTPError as e:
                line["error"] = str(e)[:200] or type(e).__name__
                self._write(line)
                continue
            line["values"] = values
            if s.last_t is not None and t_mono > s.last_t:
                dt = t_mono - s.last_t
                counters = self.watch.counter_fields
                line["rates"] = {
                    k: (v - s.last[k]) / dt
                    for k, v in values.items()
                    if k in counters and k in s.last and v >= s.last[k]
                }
            s.last, s.last_t = values, t_mono
            self._write(line)
        self.ticks += 1

    def _run(self) -> None:
        """The scrape loop; whatever ends it early (the file closed under a stop signal) ends it quietly:
        the lines already written stay, and the command's own exit says what happened."""
        try:
            self._loop()
        except Exception as e:  # noqa: BLE001 - a daemon thread must not print a traceback over the command's
            with contextlib.suppress(Exception):
                self._write({"kind": "stopped", "t_mono": time.monotonic(), "error": repr(e)[:200]})

    def _loop(self) -> None:
        timeout = httpx.Timeout(max(2.0, 4 * self.interval_s))
        with httpx.Client(timeout=timeout, headers=self.headers) as client:
            nxt = time.monotonic()
            # the first tick is the point's start, however short the point: a stop that comes before this
            # thread first runs (a loaded host) still leaves a start and an end line per source
            self._tick(client)
            while True:
                nxt += self.interval_s
                wait = nxt - time.monotonic()
                if wait < 0:  # a slow scrape: skip the missed ticks rather than burst
                    nxt = time.monotonic()
                    wait = 0.0
                if self.stop_event.wait(wait):
                    break
                self._tick(client)
            self._tick(client)  # the last line covers the point's end

    def start(self) -> None:
        self._write(
            {
                "kind": "header",
                "interval_s": self.interval_s,
                "sources": {s.name: s.url for s in self.sources},
                "clock": "time.monotonic",
            }
        )
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=10.0)


@contextlib.contextmanager
def metrics_timeline(
    point_dir: Path,
    sources: Mapping[str, str],
    interval_s: float | None = DEFAULT_INTERVAL_S,
    headers: Mapping[str, str] | None = None,
    *,
    watch: Watch,
) -> Iterator[Timeline | None]:
    """Scrape `sources` (name -> base URL) into `<point_dir>/metrics.jsonl` for the block, keeping what
    `watch` names (harness.engines.TIMELINE_WATCH: every engine's); an interval of None or 0 turns it off.
    A re-run point starts the file afresh (the capture moved the old aside)."""
    if not interval_s or not sources:
        yield None
        return
    with open(point_dir / METRICS_TIMELINE, "w", encoding="utf-8") as f:
        tl = Timeline(f, sources, interval_s, headers, watch=watch)
        tl.start()
        try:
            yield tl
        finally:
            tl.stop()


def read_timeline(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(header, sample lines) of a metrics.jsonl; a torn last line is skipped."""
    header: dict[str, Any] = {}
    samples: list[dict[str, Any]] = []
    if not path.exists():
        return header, samples
    for raw in path.read_text(encoding="utf-8").splitlines():
        try:
            obj = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(obj, dict):
            continue
        if obj.get("kind") == "header":
            header = obj
        elif obj.get("kind") == "sample":
            samples.append(obj)
    return header, samples
