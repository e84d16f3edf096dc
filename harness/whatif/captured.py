"""A capture point of ours as what-if input: the exact token ids the server saw, in send order.

The prompts are rebuilt from the captured spec and the records' seed -- the schedule is deterministic in
(spec, point, seed, tokenizer) -- with each session's history taken from the answers the server returned,
and every rebuilt prompt is checked against the sha1 the load generator recorded when it sent it
(`prompt_sha`): a replay is of what was sent or it does not happen. Rebuilding rather than storing every
prompt's ids keeps requests.jsonl small (a multi-turn prompt repeats its whole history).

The ids the server matched in its tree:
- `tokenizer: server` (sglang-generate `input_ids`): the ids sent, and as each answer the `output_ids` the
  server returned (`answer_ids` in the record);
- text sent to serve-sim: its word tokenizer (with its chat template for chat messages), whatever the
  spec's tokenizer made the text with -- the sim's own tokenization, exactly;
- text sent to another server: the spec's local tokenizer, special tokens added as the server adds them
  to a text prompt, checked against the server's own `prompt_tokens`; chat messages go through the
  server's chat template, which is not known offline, so they are refused with the reason.
Docs: docs/prediction.md.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import HarnessError
from harness.whatif.trace import Trace, _prompt_ids, _request

if TYPE_CHECKING:
    from harness.spec import ExperimentSpec, Point

SIM_ENGINE = "harness serve-sim"  # server_info's `engine` on the embedded sim


class ServerIds:
    """How one server turned a payload and an answer into token ids (see the module docstring)."""

    def __init__(self, spec: Any, info: dict[str, Any] | None, maker: Any, where: Path) -> None:
        from harness.tokenizer import WordTokenizer

        self.where = where
        self.api = spec.api
        self.sim = info is None or info.get("engine") == SIM_ENGINE  # no server_info: the sim's (as before)
        self.word = WordTokenizer()
        self.hf = None if self.sim or maker.kind != "hf" else maker.hf
        self.text_ok = self.sim or maker.kind != "word"
        version = (info or {}).get("version")
        self.engine = (info or {}).get("engine") or (
            f"the server (version {version})" if version else "the server"
        )

    def prompt(self, payload: Any) -> list[int]:
        if _is_ids(payload):
            return list(payload)  # input_ids: exactly what the server received
        if self.hf is None:
            if not self.text_ok:
                raise HarnessError(
                    f"{self.where}: tokenizer: word text sent to {self.engine}: its own tokenizer's ids "
                    "are unknown offline (use tokenizer: server, or the model's tokenizer folder)"
                )
            return _prompt_ids(payload, self.word)
        if not isinstance(payload, str):
            raise HarnessError(
                f"{self.where}: api: {self.api}: the server renders chat messages with the model's own chat "
                "template, which the replay cannot rebuild (use sglang-generate or openai-completions)"
            )
        return _encode_as_server(self.hf, payload)

    def answer(self, rec: dict[str, Any], ids_sent: bool) -> tuple[int, ...]:
        got = rec.get("answer_ids")
        if isinstance(got, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in got):
            return tuple(got)
        if ids_sent:
            raise HarnessError(
                f"{self.where}: index {rec.get('index')}: no answer_ids: the answer's token ids are "
                "unknown (a capture made before the harness recorded /generate's output_ids)"
            )
        text = rec.get("answer") or ""
        tok = self.hf if self.hf is not None else self.word
        return tuple(tok.encode(text))


def _is_ids(payload: Any) -> bool:
    """A payload of token ids (tokenizer: server), not text nor chat messages."""
    return isinstance(payload, list | tuple) and bool(payload) and all(isinstance(x, int) for x in payload)


def _encode_as_server(hf: Any, text: str) -> list[int]:
    """A text prompt as SGLang tokenizes it: the tokenizer's special tokens added (a Llama's BOS)."""
    inner = getattr(hf, "_tok", None)
    try:  # transformers' encode, and tokenizers' Tokenizer.encode(...).ids
        out = inner.encode(text, add_special_tokens=True)  # type: ignore[union-attr]
    except (AttributeError, TypeError):
        return list(hf.encode(text))
    return list(getattr(out, "ids", out))


def _load_info(point_dir: Path) -> dict[str, Any] | None:
    from harness.capture import SERVER_INFO

    f = point_dir.parent / SERVER_INFO
    try:
        info = json.loads(f.read_text())
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def captured_point(point_dir: Path) -> tuple[ExperimentSpec, Point]:
    """The spec kept in a capture's manifest (this folder or up to three above) and the point this folder ran:
    what `whatif` rebuilds and `advise --confirm` launches again."""
    from harness.capture import MANIFEST, POINT
    from harness.spec import captured_spec, point_of

    manifest = next(
        (d / MANIFEST for d in (point_dir, *point_dir.parents[:3]) if (d / MANIFEST).is_file()), None
    )
    if manifest is None:
        raise HarnessError(f"{point_dir}: no {MANIFEST} in this folder or the three above it")
    try:
        kept = json.loads(manifest.read_text())
        if not isinstance(kept.get("spec"), dict):
            raise TypeError
    except (OSError, ValueError, TypeError, AttributeError):
        raise HarnessError(f"{manifest}: spec: missing or unreadable") from None
    spec = captured_spec(kept, str(manifest), files=True)
    sweep: dict[str, Any] = {}
    if (point_dir / POINT).is_file():
        sweep = json.loads((point_dir / POINT).read_text()).get("sweep") or {}
    return spec, point_of(spec, sweep) or spec.points()[0]


def read_capture(point_dir: Path, info: dict[str, Any] | None = None) -> Trace:
    """A capture point: prompts rebuilt from the spec in the manifest (checked against the sha1 sent),
    histories from the answers the server actually returned, requests in the order they were sent.
    `info`: the server's server_info (default: the server folder's server_info.json)."""
    from harness.capture import REQUESTS, read_jsonl
    from harness.whatif.routing import routing_text
    from harness.workloads import build_schedule
    from harness.workloads.prompts import PromptBuilder, Turnout
    from harness.workloads.tokenizers import load_prompt_maker

    spec, point = captured_point(point_dir)
    requests = point_dir / REQUESTS
    records, _bad = read_jsonl(requests)
    # what reached the server: not the warm-up, nor what was recorded as not sent
    records = [r for r in records if r.get("sent_mono") is not None and not r.get("warmup")]
    if not records:
        raise HarnessError(f"{requests}: no records")
    seed = int(records[0].get("seed") or 0)
    try:
        maker = load_prompt_maker(spec.tokenizer)  # the run's own tokenizer: the same prompts
    except HarnessError as e:
        raise HarnessError(f"{point_dir}: the run's prompts cannot be rebuilt: {e}") from None
    schedule = build_schedule(spec, point.workload, seed, maker)
    server = ServerIds(spec, info if info is not None else _load_info(point_dir), maker, requests)
    builder = PromptBuilder(schedule, spec.api)
    # (conversation, request, its place in the conversation): an agent's `turn` is its depth, not its place
    by_index = {r.index: (c, r, k) for c in schedule.conversations for k, r in enumerate(c.turns)}
    history: dict[int, list] = {}
    reqs = []
    for rec in sorted(records, key=lambda r: (r.get("sent_mono") or 0.0, r.get("index", 0))):
        if rec.get("index") not in by_index:
            raise HarnessError(f"{requests}: index {rec.get('index')!r} is not in the spec's schedule")
        conv, req, place = by_index[rec["index"]]
        hist = history.setdefault(conv.id, [])
        prompt = builder.build(conv, req, hist[:place])
        sent = rec.get("prompt_sha")
        if isinstance(sent, str) and sent != prompt.sha:
            raise HarnessError(
                f"{requests}: index {rec['index']}: the prompt rebuilt from the spec and seed {seed} is not "
                "the one sent (prompt_sha differs): the spec, tokenizer or code changed since the run"
            )
        ids = server.prompt(prompt.payload)
        counted = rec.get("prompt_tokens")
        if isinstance(counted, int) and counted != len(ids):
            raise HarnessError(
                f"{requests}: index {rec['index']}: the replay has {len(ids)} prompt tokens, the server "
                f"counted {counted}: it tokenized the prompt otherwise"
            )
        ans = server.answer(rec, _is_ids(prompt.payload))
        answer = rec.get("answer") or ""
        hist.append(Turnout(answer=answer, answer_ids=ans, completion_tokens=rec.get("completion_tokens")))
        reqs.append(_request(ids, list(ans), conv, req, routing_text(prompt.payload)))
    return Trace(
        f"{spec.name}-{point_dir.name}",
        reqs,
        unit=1,
        kind="tokens",
        concurrency=point.concurrency,
        request_rate=point.request_rate,
        seed=seed,
    )
