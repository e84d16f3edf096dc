"""Inputs of `harness whatif`, reduced to one shape: requests in arrival order, each a key to match.

- Mooncake-format JSONL (`hash_ids`: one id per block of `block_size` tokens): keys are block ids, so
  the tree runs at block granularity as SGLang's would when keyed by block ids (pools in blocks).
- a capture point folder of ours (requests.jsonl + the manifest's spec): prompts rebuilt with the answers
  the server returned, in send order (word tokenizer only).
- an experiment spec (YAML): its workload generated with the word tokenizer, answers modelled as the sim
  gives them (`harness.sim.answers.answer_ids`), keys are token ids (pools in tokens).

Specs and captures also carry the run's concurrency (and request rate) and each request's conversation
and schedule index, so `harness.whatif.replay` can replay them through the sim's scheduler as the load
generator would have sent them; Mooncake traces carry neither and replay one request at a time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import HarnessError


@dataclass(frozen=True)
class TraceRequest:
    key: tuple[int, ...]  # what the tree matches: token ids, or block ids
    tokens: int  # prompt length in tokens
    arrival: float = 0.0  # seconds from the trace start
    output_tokens: int = 0
    session: int | None = None
    turn: int | None = None
    output_key: tuple[int, ...] = ()  # the answer's ids, cached after the prompt when known (as SGLang does)
    position: int | None = None  # how many times this session's / group's prefix was sent before
    index: int = 0  # the schedule's nominal send order (the load generator sends the lowest ready index)
    conversation: int | None = None  # turns of one conversation go strictly in order (closed loop)
    group: int | None = None


@dataclass
class Trace:
    name: str
    requests: list[TraceRequest]
    unit: int = 1  # tokens per key element (block size for block traces)
    kind: str = "tokens"  # tokens | blocks
    notes: list[str] = field(default_factory=list)
    concurrency: int | None = None  # the run's cap on requests in flight; None: no scheduler replay
    request_rate: float | None = None  # Poisson arrivals (requests/s) on top of the cap, as the loadgen
    seed: int = 0  # the schedule seed (arrival offsets)

    def hit_tokens(self, req: TraceRequest, units: int) -> int:
        """Tokens a hit of `units` key elements saves; the last block counts its real length."""
        return min(units * self.unit, req.tokens)


def read_mooncake(path: Path, block_size: int = 512) -> Trace:
    """Mooncake JSONL: `hash_ids` (required), `input_length`, `output_length`, `timestamp` (ms)."""
    reqs: list[TraceRequest] = []
    try:
        f = path.open()
    except OSError as e:
        raise HarnessError(f"{path}: cannot read: {e.strerror}") from None
    with f:
        for no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise HarnessError(f"{path}:{no}: not JSON ({e.msg})") from None
            if not isinstance(obj, dict):
                raise HarnessError(f"{path}:{no}: expected a JSON object, got {type(obj).__name__}")
            ids = obj.get("hash_ids")
            if not isinstance(ids, list) or not all(
                isinstance(i, int) and not isinstance(i, bool) for i in ids
            ):
                raise HarnessError(f"{path}:{no}: hash_ids: expected a list of integers, got {ids!r:.60}")
            n_in = obj.get("input_length", len(ids) * block_size)
            if not isinstance(n_in, int) or n_in < 0:
                raise HarnessError(
                    f"{path}:{no}: input_length: expected a non-negative integer, got {n_in!r}"
                )
            ts = obj.get("timestamp", 0)
            if not isinstance(ts, int | float):
                raise HarnessError(f"{path}:{no}: timestamp: expected a number (ms), got {ts!r}")
            out = obj.get("output_length", 0)
            reqs.append(TraceRequest(tuple(ids), n_in, ts / 1000.0, int(out or 0)))
    if not reqs:
        raise HarnessError(f"{path}: no requests")
    order = sorted(range(len(reqs)), key=lambda i: reqs[i].arrival)  # stable: file order breaks ties
    return Trace(path.stem, [reqs[i] for i in order], unit=block_size, kind="blocks")


def read_spec(path: Path, seed: int = 0, answer_seed: int = 0, point_index: int = 0) -> Trace:
    """An experiment spec's workload (its first sweep point, or `point_index`) in send order, with the
    sim's deterministic answers as history. `answer_seed` is serve-sim's `--random-seed` (default 0), not
    the schedule seed."""
    from harness.sim.answers import answer_ids
    from harness.spec import load_spec
    from harness.tokenizer import WordTokenizer
    from harness.workloads import build_schedule
    from harness.workloads.prompts import PromptBuilder, Turnout

    spec = load_spec(path)
    point = spec.points()[point_index]
    schedule = build_schedule(spec, point.workload, seed, "word")
    builder = PromptBuilder(schedule, spec.api)
    tok = WordTokenizer()
    # one pass over the conversations (a trace's are read from its file on each pass)
    pairs = sorted(((c, r) for c in schedule.conversations for r in c.turns), key=lambda cr: cr[1].index)
    history: dict[int, list] = {}
    reqs = []
    for conv, r in pairs:
        hist = history.setdefault(conv.id, [])
        prompt = builder.build(conv, r, hist)
        ids = _prompt_ids(prompt.payload, tok)
        ans = answer_ids(ids, r.output_tokens, answer_seed)
        hist.append(Turnout(answer=tok.decode(ans), answer_ids=tuple(ans), completion_tokens=len(ans)))
        reqs.append(_request(ids, ans, conv, r))
    notes = []
    if len(spec.points()) > 1:
        which = "the first" if point_index == 0 else f"point {point_index + 1}"
        notes.append(f"{path.name}: replaying {which} of {len(spec.points())} sweep points ({point.sweep})")
    return Trace(
        path.stem,
        reqs,
        unit=1,
        kind="tokens",
        notes=notes,
        concurrency=point.concurrency,
        request_rate=point.request_rate,
        seed=seed,
    )


def _prompt_ids(payload, tok) -> list[int]:
    """The ids the sim tokenizes a payload to: chat messages through its template, text word by word."""
    from harness.tokenizer import render_chat

    if isinstance(payload, list) and payload and isinstance(payload[0], dict):
        payload = render_chat(payload)
    return tok.encode(payload) if isinstance(payload, str) else list(payload)


def _request(ids: list[int], ans: list[int], conv, r) -> TraceRequest:
    return TraceRequest(
        tuple(ids),
        len(ids),
        r.arrival or 0.0,  # a replayed trace's own send time (timestamps: honor)
        len(ans),
        conv.session,
        r.turn,
        tuple(ans),
        position=r.position,
        index=r.index,
        conversation=conv.id,
        group=conv.group,
    )


def read_capture(point_dir: Path) -> Trace:
    """A capture point of ours: prompts rebuilt from the spec in the manifest, histories from the answers
    the server actually returned (`answer`), requests in the order they were sent."""
    from harness.capture import MANIFEST, POINT, REQUESTS, read_jsonl
    from harness.spec import parse_spec
    from harness.tokenizer import WordTokenizer
    from harness.workloads import build_schedule
    from harness.workloads.prompts import PromptBuilder, Turnout

    manifest = next(
        (d / MANIFEST for d in (point_dir, *point_dir.parents[:3]) if (d / MANIFEST).is_file()), None
    )
    if manifest is None:
        raise HarnessError(f"{point_dir}: no {MANIFEST} in this folder or the three above it")
    try:
        raw_spec = json.loads(manifest.read_text())["spec"]
    except (OSError, ValueError, KeyError, TypeError):
        raise HarnessError(f"{manifest}: spec: missing or unreadable") from None
    spec = parse_spec(raw_spec, str(manifest), base_dir=spec_dir(manifest))
    if spec.tokenizer != "word":
        raise HarnessError(
            f"{manifest}: tokenizer: only the word tokenizer can be replayed offline, got {spec.tokenizer!r}"
        )
    records, _bad = read_jsonl(point_dir / REQUESTS)
    # what reached the server: not the warm-up, nor what was recorded as not sent
    records = [r for r in records if r.get("sent_mono") is not None and not r.get("warmup")]
    if not records:
        raise HarnessError(f"{point_dir / REQUESTS}: no records")
    sweep = {}
    if (point_dir / POINT).is_file():
        sweep = json.loads((point_dir / POINT).read_text()).get("sweep") or {}
    point = next((p for p in spec.points() if p.sweep == sweep), spec.points()[0])
    seed = int(records[0].get("seed") or 0)
    schedule = build_schedule(spec, point.workload, seed, "word")
    builder = PromptBuilder(schedule, spec.api)
    tok = WordTokenizer()
    by_index = {r.index: (c, r) for c in schedule.conversations for r in c.turns}
    history: dict[int, list] = {}
    reqs = []
    for rec in sorted(records, key=lambda r: (r.get("sent_mono") or 0.0, r.get("index", 0))):
        if rec.get("index") not in by_index:
            raise HarnessError(
                f"{point_dir / REQUESTS}: index {rec.get('index')!r} is not in the spec's schedule"
            )
        conv, req = by_index[rec["index"]]
        hist = history.setdefault(conv.id, [])
        prompt = builder.build(conv, req, hist[: req.turn])
        ids = _prompt_ids(prompt.payload, tok)
        answer = rec.get("answer") or ""
        ans = tok.encode(answer)
        hist.append(Turnout(answer=answer, answer_ids=tuple(ans), completion_tokens=len(ans)))
        reqs.append(_request(ids, ans, conv, req))
    return Trace(
        f"{spec.name}-{point_dir.name}",
        reqs,
        unit=1,
        kind="tokens",
        concurrency=point.concurrency,
        request_rate=point.request_rate,
        seed=seed,
    )


def spec_dir(manifest: Path) -> Path:
    """Where the captured spec's relative paths (a trace file) resolve: the spec's folder as the manifest
    recorded it (absolute, or relative to where the run started: usually here), else the current folder."""
    try:
        sp = json.loads(manifest.read_text()).get("spec_path")
    except (OSError, ValueError):
        sp = None
    if isinstance(sp, str) and sp and Path(sp).parent.is_dir():
        return Path(sp).parent
    return Path.cwd()


def read_input(path: Path, block_size: int = 512) -> Trace:
    if path.is_dir():
        from harness.capture import REQUESTS

        if not (path / REQUESTS).is_file():
            raise HarnessError(f"{path}: not a capture point folder (no {REQUESTS})")
        return read_capture(path)
    if path.suffix in (".yaml", ".yml"):
        return read_spec(path)
    if path.suffix in (".jsonl", ".json"):
        return read_mooncake(path, block_size)
    raise HarnessError(
        f"{path}: unknown input (expected a Mooncake .jsonl, an experiment spec .yaml or a capture point folder)"
    )
