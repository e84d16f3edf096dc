"""Response bodies the sim sends, shaped as SGLang 0.5.23 shapes them (OpenAI and native /generate).

Each final body also carries `sim_time`, the request's stamps on the sim's virtual clock (live.py):
SGLang has no such field, so clients that do not know it ignore it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.sim.engine import SimRequest
from harness.sim.live import sim_time


def finish_reason(req: SimRequest) -> str:
    """OpenAI's finish_reason: "length", "abort" or "stop"."""
    return req.finish_reason if req.finish_reason in ("length", "abort") else "stop"


def usage(req: SimRequest, cache_report: bool) -> dict[str, Any]:
    """OpenAI usage; cached tokens only with --enable-cache-report and only when there are some."""
    cached = req.cached_tokens
    details = {"cached_tokens": cached} if (cache_report and cached > 0) else None
    return {
        "prompt_tokens": len(req.input_ids),
        "total_tokens": len(req.input_ids) + req.generated,
        "completion_tokens": req.generated,
        "prompt_tokens_details": details,
        "reasoning_tokens": 0,
    }


def storage_class(engine: Any) -> str | None:
    """The L3 backend's class name (`storage_backend` in cached_tokens_details), None without L3."""
    return engine.l3.class_name if getattr(engine, "l3", None) is not None else None


def cached_details(req: SimRequest, storage_backend: str | None = None) -> dict[str, Any] | None:
    """cached_tokens_details by tier; with L3 on, `storage` and `storage_backend` (its class) as well;
    None (JSON null) when nothing was cached, as 0.5.23 sends on a full miss
    (scheduler_components/output_streamer.get_cached_tokens_details)."""
    if req.cached_device + req.cached_host + req.cached_storage <= 0:
        return None
    details: dict[str, Any] = {"device": req.cached_device, "host": req.cached_host}
    if storage_backend is not None:
        details["storage"] = req.cached_storage
        details["storage_backend"] = storage_backend
    return details


def meta_info(req: SimRequest, e2e: float, storage_backend: str | None = None) -> dict[str, Any]:
    """/generate's meta_info, plus the virtual stamps."""
    reason: dict[str, Any]
    if req.finish_reason == "length":
        reason = {"type": "length", "length": req.generated}
    elif req.finish_reason == "abort" and req.abort_message:  # the scheduler's (the queue limit): a 503
        reason = {"type": "abort", "status_code": 503, "message": req.abort_message}
    elif req.finish_reason == "abort":
        reason = {"type": "abort", "message": "client disconnected"}
    else:
        reason = {"type": "stop", "matched": 128009}
    return {
        "id": req.rid,
        "finish_reason": reason if req.finished else None,
        "prompt_tokens": len(req.input_ids),
        "weight_version": "default",
        "num_retractions": req.retractions,  # tokenizer_manager: retracted or preempted, then run again
        "completion_tokens": req.generated,
        "cached_tokens": req.cached_tokens,
        "cached_tokens_details": cached_details(req, storage_backend),
        "e2e_latency": e2e,
        "sim_time": sim_time(req),
    }


@dataclass(frozen=True)
class OpenAIShape:
    """One chat or text completion's envelope: id, object names, created, model."""

    chat: bool
    rid: str
    created: int
    model: str

    def _envelope(
        self, obj: str, choices: list[dict[str, Any]], use: dict[str, Any] | None
    ) -> dict[str, Any]:
        return {
            "id": self.rid,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": choices,
            "usage": use,
        }

    @property
    def chunk_object(self) -> str:
        return "chat.completion.chunk" if self.chat else "text_completion"

    def completion(self, req: SimRequest, text: str, use: dict[str, Any]) -> dict[str, Any]:
        """The non-streamed answer, with the virtual stamps."""
        choice: dict[str, Any] = {
            "index": 0,
            "logprobs": None,
            "finish_reason": finish_reason(req),
            "matched_stop": None,
        }
        if self.chat:
            choice["message"] = {
                "role": "assistant",
                "content": text,
                "reasoning_content": None,
                "tool_calls": None,
            }
        else:
            choice["text"] = text
        body = self._envelope("chat.completion" if self.chat else "text_completion", [choice], use)
        body["sim_time"] = sim_time(req)
        return body

    def chunk(self, delta_text: str | None, finish: str | None, role: bool = False) -> dict[str, Any]:
        """One streamed event: a text delta, or (finish set) the final event of the choice."""
        c: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": finish, "matched_stop": None}
        if self.chat:
            d: dict[str, Any] = {"role": "assistant"} if role else {}
            d.update(content=delta_text, reasoning_content=None, tool_calls=None)
            c["delta"] = d
        else:
            c["text"] = delta_text or ""
        return self._envelope(self.chunk_object, [c], None)

    def final_chunk(self, req: SimRequest) -> dict[str, Any]:
        """The event with the finish reason, carrying the virtual stamps."""
        body = self.chunk(None if self.chat else "", finish_reason(req))
        body["sim_time"] = sim_time(req)
        return body

    def usage_chunk(self, use: dict[str, Any]) -> dict[str, Any]:
        """stream_options.include_usage: an event with no choices and the usage."""
        return self._envelope(self.chunk_object, [], use)
