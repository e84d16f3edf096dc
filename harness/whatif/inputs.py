"""Inputs of `harness whatif`, reduced to one shape: requests in arrival order, each a key to match.

- Mooncake-format JSONL (`hash_ids`: one id per block of `block_size` tokens): keys are block ids, so
  the tree runs at block granularity as SGLang's would when keyed by block ids (pools in blocks); a
  bailian session trace (`chat_id`, `parent_chat_id`: harness.whatif.bailian_file) likewise, 16-token blocks.
- a capture point folder of ours (requests.jsonl + the manifest's spec): prompts rebuilt with the answers
  the server returned, in send order, as the ids the server saw (any tokenizer: harness.whatif.captured).
- an experiment spec (YAML): its workload generated with the word tokenizer, answers modelled as the sim
  gives them (`harness.sim.answers.answer_ids`), keys are token ids (pools in tokens).

Specs and captures also carry the run's concurrency (and request rate) and each request's conversation
and schedule index, so `harness.whatif.replay` can replay them through the sim's scheduler as the load
generator would have sent them; Mooncake traces carry neither and replay one request at a time.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness.errors import HarnessError
from harness.whatif.trace import Trace, TraceRequest, _prompt_ids, _request

__all__ = [
    "Trace",
    "TraceRequest",
    "read_agentic",
    "read_capture",
    "read_input",
    "read_mooncake",
    "read_spec",
]


def read_mooncake(path: Path, block_size: int = 512) -> Trace:
    """Mooncake JSONL: `hash_ids` (required), `input_length`, `output_length`, `timestamp` (ms).

    Each hash id stands for `block_size` tokens but the last, which may be partial: `input_length` is
    within (len(hash_ids) - 1) x block_size + 1 .. len(hash_ids) x block_size (absent: all blocks full),
    as the load generator's reader (harness.workloads.trace_files) and the bailian reader require. The
    requests are in arrival order (Mooncake's published traces are): a timestamp before the line above it
    is refused, because a slice (`--confirm-requests`) and a live replay send the file in its order."""
    reqs: list[TraceRequest] = []
    last_ts: float | None = None
    last_no = 0
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
            # JSON gives int (bool is its own type): the element types as a set, one C-level pass
            if not isinstance(ids, list) or not set(map(type, ids)) <= {int}:
                raise HarnessError(f"{path}:{no}: hash_ids: expected a list of integers, got {ids!r:.60}")
            n_in = obj.get("input_length", len(ids) * block_size)
            if not isinstance(n_in, int) or n_in < 0:
                raise HarnessError(
                    f"{path}:{no}: input_length: expected a non-negative integer, got {n_in!r}"
                )
            if n_in > len(ids) * block_size or n_in <= (len(ids) - 1) * block_size:
                lo = (len(ids) - 1) * block_size + 1 if ids else 0
                raise HarnessError(
                    f"{path}:{no}: input_length: {n_in} tokens with {len(ids)} hash_ids of {block_size} "
                    f"tokens (--block-size); expected {lo}..{len(ids) * block_size}: every block full but the last"
                )
            ts = obj.get("timestamp", 0)
            if not isinstance(ts, int | float):
                raise HarnessError(f"{path}:{no}: timestamp: expected a number (ms), got {ts!r}")
            if last_ts is not None and ts < last_ts:
                raise HarnessError(
                    f"{path}:{no}: timestamp: {ts!r} ms is before line {last_no}'s {last_ts!r} ms; a Mooncake "
                    "trace lists its requests in arrival order (sort the file by timestamp)"
                )
            last_ts, last_no = ts, no
            out = obj.get("output_length", 0)
            reqs.append(TraceRequest(tuple(ids), n_in, ts / 1000.0, int(out or 0)))
    if not reqs:
        raise HarnessError(f"{path}: no requests")
    return Trace(path.stem, reqs, unit=block_size, kind="blocks")


def read_spec(path: Path, seed: int = 0, answer_seed: int = 0, point_index: int = 0) -> Trace:
    """An experiment spec's workload (its first sweep point, or `point_index`) in send order, with the
    sim's deterministic answers as history. `answer_seed` is serve-sim's `--random-seed` (default 0), not
    the schedule seed."""
    from harness.sim.answers import answer_ids
    from harness.spec import load_spec
    from harness.tokenizer import WordTokenizer
    from harness.whatif.routing import routing_text
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
        reqs.append(_request(ids, ans, conv, r, routing_text(prompt.payload)))
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


def read_capture(point_dir: Path, info: dict | None = None) -> Trace:
    """A capture point of ours, replayed with the exact ids the server saw (harness.whatif.captured)."""
    from harness.whatif.captured import read_capture as read

    return read(point_dir, info)


def read_agentic(path: Path) -> Trace:
    """An agentic trace folder or file (harness.workloads.agentic_trace): every conversation an agent
    started at t=0, all at once (concurrency = conversations), each later request due its think time after
    the previous answer; keys are the fleet's block ids (the file's `block_size` tokens each, local scope)."""
    from harness.workloads.agentic_schedule import describe, slots
    from harness.workloads.agentic_trace import read_fleet

    convs = read_fleet(path)
    reqs = []
    for conv, conv_slots in zip(convs, slots(convs, "think", 1.0), strict=True):
        for r, s in zip(conv.requests, conv_slots, strict=True):
            reqs.append(
                TraceRequest(
                    r.hash_ids[: r.input_tokens // conv.block_size],  # full blocks: a tail never hits
                    r.input_tokens,
                    0.0,
                    r.output_tokens,
                    session=s.conversation,
                    turn=s.turn,
                    position=s.turn,
                    index=s.index,
                    conversation=s.conversation,
                    gap=s.gap or 0.0,
                )
            )
    reqs.sort(key=lambda r: r.index)
    return Trace(
        path.stem,
        reqs,
        unit=convs[0].block_size,
        kind="blocks",
        notes=[describe(convs)],
        concurrency=len(convs),
        agents=True,
    )


def _is_agentic(path: Path) -> bool:
    """A folder of .json files, or a .json file whose object opens with kv-cache-tester's keys."""
    if path.is_dir():
        return any(p.suffix == ".json" for p in path.iterdir())
    with path.open("rb") as f:
        head = f.read(512)
    return head.lstrip().startswith(b"{") and b'"block_size"' in head and b'"requests"' in head


def read_input(path: Path, block_size: int = 512) -> Trace:
    if path.is_dir():
        from harness.capture import REQUESTS

        if not (path / REQUESTS).is_file():
            if _is_agentic(path):
                return read_agentic(path)
            raise HarnessError(
                f"{path}: neither a capture point folder (no {REQUESTS}) nor agentic traces (no .json files)"
            )
        return read_capture(path)
    if path.suffix in (".yaml", ".yml"):
        return read_spec(path)
    if path.suffix == ".json" and path.is_file() and _is_agentic(path):
        return read_agentic(path)
    if path.suffix in (".jsonl", ".json"):
        from harness.whatif.bailian_file import is_bailian, read_bailian

        return read_bailian(path) if is_bailian(path) else read_mooncake(path, block_size)
    raise HarnessError(
        f"{path}: unknown input (expected a Mooncake .jsonl, an agentic trace .json or folder, "
        "an experiment spec .yaml or a capture point folder)"
    )
