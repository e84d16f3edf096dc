"""Thin per-API adapters: the request body, and how one parsed event updates the stream state."""

from __future__ import annotations

from typing import Any

from harness.capture.jsoncodec import dumps
from harness.workloads.prompts import BuiltPrompt

# what follows max_tokens in every OpenAI body: constant, so encoded once
_OPENAI_TAIL = b',"stream":true,"stream_options":{"include_usage":true},"ignore_eos":true,"temperature":0}'
_STRICT_TAIL = b',"stream":true,"stream_options":{"include_usage":true},"temperature":0}'  # no ignore_eos


class StreamState:
    """What a stream has told us so far; filled in by a dialect, read by the client."""

    __slots__ = (
        "pieces",
        "reasoning",
        "finish",
        "usage",
        "timings",
        "done",
        "cum_text",
        "output_ids",
        "error",
        "event_tokens",
        "sim_time",
    )

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.reasoning: list[str] = []
        self.finish: str | None = None
        self.usage: dict[str, Any] | None = None
        self.timings: dict[str, Any] | None = None
        self.done = False
        self.cum_text = ""  # /generate: the cumulative text so far
        self.output_ids: list[int] | None = None
        self.error: str | None = None
        self.event_tokens: list[int] | None = None  # tokens per text event, where the server counted them
        self.sim_time: dict[str, Any] | None = None  # serve-sim's virtual stamps (harness.sim.live)

    def answer(self) -> str:
        text = "".join(self.pieces)
        if self.reasoning:
            return "<think>" + "".join(self.reasoning) + "</think>" + text
        return text


FINAL_TRIES = 16  # attempts per run to learn a final template (a finish event that never proves stops there)


class Dialect:
    name = ""
    path = ""
    # JSON key of the text field whose events may take the same-shape fast path (harness.client.fastpath)
    text_key: bytes | None = None
    # every top-level key event() may read: any other top-level field may change per event (a timestamp,
    # an id) without leaving the fast path. Keep it in step with event().
    read_keys: frozenset[str] = frozenset()

    def __init__(self, ignore_eos: bool = True) -> None:
        self.tail = _OPENAI_TAIL if ignore_eos else _STRICT_TAIL  # the spec's `ignore_eos` (OpenAI bodies)
        self.templates: list = []  # fast-path templates proven on this run's streams (harness.client.fastpath)
        self.finals: list = []  # final templates (text + finish reason), kept apart from the text ones
        self.final_tries = FINAL_TRIES  # attempts left to learn one

    def body(self, model: str, prompt: BuiltPrompt, max_tokens: int) -> bytes:
        raise NotImplementedError

    def event(self, st: StreamState, obj: Any) -> bool:
        """Apply one event; True when it carried generated text (a token event)."""
        raise NotImplementedError


def _openai_common(st: StreamState, obj: dict) -> None:
    u = obj.get("usage")
    if u:
        st.usage = u
    t = obj.get("timings")
    if t:
        st.timings = t
    e = obj.get("error")
    if e:
        st.error = e.get("message", str(e)) if isinstance(e, dict) else str(e)
    s = obj.get("sim_time")
    if isinstance(s, dict):
        st.sim_time = s


def _openai_body(model: str, key: bytes, payload: Any, max_tokens: int, tail: bytes = _OPENAI_TAIL) -> bytes:
    """Streamed, fixed-length (ignore_eos), greedy request with usage in the stream.

    The bytes json.dumps gives for {model, key: payload, max_tokens, stream, stream_options, ignore_eos,
    temperature}, with only the parts that change encoded per request (`tail`: _STRICT_TAIL leaves
    ignore_eos out).
    """
    return b"".join(
        (b'{"model":', dumps(model), key, dumps(payload), b',"max_tokens":', dumps(max_tokens), tail)
    )


class OpenAIChat(Dialect):
    name, path = "openai-chat", "/v1/chat/completions"
    text_key = b'"content":'
    read_keys = frozenset(("choices", "usage", "timings", "error", "sim_time"))

    def body(self, model: str, prompt: BuiltPrompt, max_tokens: int) -> bytes:
        return _openai_body(model, b',"messages":', prompt.payload, max_tokens, self.tail)

    def event(self, st: StreamState, obj: Any) -> bool:
        tok = False
        choices = obj.get("choices")
        if choices:
            c = choices[0]
            d = c.get("delta")
            if d:
                txt = d.get("content")
                if txt and isinstance(txt, str):
                    st.pieces.append(txt)
                    tok = True
                r = d.get("reasoning_content")
                if r and isinstance(r, str):
                    st.reasoning.append(r)
                    tok = True
            fr = c.get("finish_reason")
            if fr:
                st.finish = fr
        if "usage" in obj or "timings" in obj or "error" in obj or "sim_time" in obj:
            _openai_common(st, obj)
        return tok


class OpenAICompletions(Dialect):
    name, path = "openai-completions", "/v1/completions"
    text_key = b'"text":'
    read_keys = frozenset(("choices", "usage", "timings", "error", "sim_time"))

    def body(self, model: str, prompt: BuiltPrompt, max_tokens: int) -> bytes:
        return _openai_body(model, b',"prompt":', prompt.payload, max_tokens, self.tail)

    def event(self, st: StreamState, obj: Any) -> bool:
        tok = False
        choices = obj.get("choices")
        if choices:
            c = choices[0]
            txt = c.get("text")
            if txt and isinstance(txt, str):
                st.pieces.append(txt)
                tok = True
            fr = c.get("finish_reason")
            if fr:
                st.finish = fr
        if "usage" in obj or "timings" in obj or "error" in obj or "sim_time" in obj:
            _openai_common(st, obj)
        return tok


class SGLangGenerate(Dialect):
    """Native /generate: cumulative `text` per event (deltas taken here), usage in `meta_info`."""

    name, path = "sglang-generate", "/generate"

    def body(self, model: str, prompt: BuiltPrompt, max_tokens: int) -> bytes:
        key = "text" if isinstance(prompt.payload, str) else "input_ids"
        return dumps(
            {
                key: prompt.payload,
                "sampling_params": {"max_new_tokens": max_tokens, "ignore_eos": True, "temperature": 0},
                "stream": True,
            }
        )

    def event(self, st: StreamState, obj: Any) -> bool:
        if "error" in obj:
            e = obj["error"]
            st.error = e.get("message", str(e)) if isinstance(e, dict) else str(e)
            return False
        tok = False
        text = obj.get("text")
        prev = st.cum_text
        if text and isinstance(text, str):
            n = len(prev)
            # cumulative unless the server streams increments (--incremental-streaming-output)
            cumulative = len(text) >= n and text.startswith(prev[-16:], max(0, n - 16))
            delta = text[n:] if cumulative else text
            st.cum_text = text if cumulative else prev + text
            if delta:
                st.pieces.append(delta)
                tok = True
            ids = obj.get("output_ids")
            if isinstance(ids, list):
                st.output_ids = ids if cumulative or st.output_ids is None else st.output_ids + ids
        meta = obj.get("meta_info")
        if meta:
            st.usage = meta
            if isinstance(meta.get("sim_time"), dict):
                st.sim_time = meta["sim_time"]
            fr = meta.get("finish_reason")
            if fr:
                st.finish = fr.get("type", str(fr)) if isinstance(fr, dict) else str(fr)
        return tok


def with_priority(body: bytes, value: int) -> bytes:
    """A body (a JSON object) with SGLang's top-level `priority` field added."""
    return body[:-1] + b',"priority":' + str(int(value)).encode() + b"}"


DIALECTS: dict[str, type[Dialect]] = {d.name: d for d in (OpenAIChat, OpenAICompletions, SGLangGenerate)}


def normalize_base_url(url: str) -> str:
    """The server's root: a trailing slash or `/v1` dropped, so each dialect's path can follow it."""
    url = url.rstrip("/")
    return url[:-3] if url.endswith("/v1") else url


def get_dialect(api: str, ignore_eos: bool = True) -> Dialect:
    return DIALECTS[api](ignore_eos)
