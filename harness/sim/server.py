"""SGLang's HTTP surface over the sim engine (aiohttp): OpenAI and native endpoints, control, metrics.

The engine runs in this event loop (live.LiveEngine: a virtual clock paced to --time-scale, lockstep
with the harness's load generator); handlers submit requests to it and stream the tokens it produces.
Every answer carries the request's virtual stamps (`sim_time`: arrival, first token, finish).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
import traceback
import uuid
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from harness.protocol.lockstep import HEADER as LOCKSTEP_HEADER
from harness.protocol.lockstep import BadHint, ClientHint, parse_hint
from harness.sim import health_faults, introspect
from harness.sim.answers import THINK_IDS, plan_answer
from harness.sim.engine import Engine, EngineConfig, SimRequest
from harness.sim.faults import Faults, RequestFaults
from harness.sim.introspect import VERSION
from harness.sim.live import LiveEngine
from harness.sim.logfmt import FLUSH_OK_LINE, READY_LINE, SimLogger, flush_refused_line
from harness.sim.metrics import E2E_BUCKETS, TTFT_BUCKETS, Histogram, Snapshot, render
from harness.sim.priority import PriorityError, request_priority
from harness.sim.responses import OpenAIShape, meta_info, storage_class, usage
from harness.sim.token_chunks import token_chunks
from harness.tokenizer import WordTokenizer, drop_reasoning, render_chat

__all__ = ["VERSION", "SimServer"]
FLUSH_MESSAGE = (
    "Cache flushed.\nPlease check backend logs for more details. "
    "(When there are running or waiting requests, the operation will not be performed.)\n"
)
GENERATE_DEFAULT_MAX_NEW = 128  # SGLang's sampling_params default
OPENAI_DEFAULT_CAP = 256  # answer length cap when an OpenAI request gives no max_tokens
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


class BadRequest(Exception):
    """A client error answered as SGLang's OpenAI-style error body with HTTP 400."""


class SimServer:
    """One simulated SGLang server: engine, logger, metrics, faults and the aiohttp app."""

    def __init__(self, args: Any) -> None:
        self.args = args
        self.start_mono = time.monotonic()
        self.config = EngineConfig.from_args(args)
        self.logger = SimLogger(args.log_level, args.log_file)
        self.engine = Engine(self.config, log=self.logger)
        health_faults.install(self.engine, args.fault_hicache)
        self.hang = health_faults.Hang(args.fault_hicache, args.fault_hang_after)
        self.tok = WordTokenizer()
        self.faults = Faults(args, start=self.start_mono)
        self.model_name = args.served_model_name or args.model_path
        self.time_scale = float(args.time_scale)
        self.ttft = Histogram(TTFT_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)
        self.live = LiveEngine(
            self.engine,
            self.time_scale,
            hold_wait_s=float(getattr(args, "sim_lockstep_wait", 1.0)),
            log_info=self.logger.info,
            log_warning=self.logger.warning,
        )
        self.ready_logged = False
        self.port: int | None = None
        self._loop_task: asyncio.Task | None = None
        self._bg: set[asyncio.Task] = set()
        self.exit_on_crash = True  # tests that embed the server may turn this off

    # --- time ------------------------------------------------------------------------------
    def model_now(self) -> float:
        """Modelled seconds since start, on the engine's virtual clock."""
        return self.live.model_now()

    async def _engine_loop(self) -> None:
        """The live engine's loop; an exception in it crashes the server as SGLang's scheduler does."""
        try:
            await self.live.run()
        except asyncio.CancelledError:
            raise
        except Exception:  # a dead loop would hang every client; crash loudly as SGLang's scheduler does
            self.logger.write(f"Scheduler hit an exception: {traceback.format_exc()}", "error")
            self._crash()

    def _crash(self) -> None:
        """SGLang's launcher kills the whole server when its scheduler process dies."""
        if self.exit_on_crash:
            os._exit(1)

    # --- startup ---------------------------------------------------------------------------
    def startup_lines(self) -> None:
        for level, line in introspect.startup_lines(self.args, self.config, self.engine, self.model_name):
            self.logger.write(line, level)

    async def _announce_ready(self) -> None:
        if self.faults.never_ready:
            return
        delay = self.faults.ready_delay - (time.monotonic() - self.start_mono)
        if delay > 0:
            await asyncio.sleep(delay)
        self.logger.info(READY_LINE)
        self.ready_logged = True

    # --- helpers ---------------------------------------------------------------------------
    def _ready(self) -> bool:
        return self.faults.ready()

    def _snapshot(self) -> Snapshot:
        return introspect.snapshot(self.engine, self.config)

    def server_info(self) -> dict[str, Any]:
        return introspect.server_info(self.args, self.config, self.engine, self.port, self.model_name)

    def _make_request(
        self, prompt_ids: list[int], max_new: int | None, ignore_eos: bool, default_cap: int
    ) -> SimRequest:
        if not prompt_ids:
            raise BadRequest("The input is empty.")
        limit = self.engine.max_input_len()
        if max_new is not None and (not isinstance(max_new, int) or max_new < 0):
            raise BadRequest(f"max_new_tokens must be a non-negative integer, got {max_new!r}")
        if len(prompt_ids) >= limit:
            raise BadRequest(
                f"The input ({len(prompt_ids)} tokens) is longer than the model's context length ({limit} tokens)."
            )
        cap = default_cap if max_new is None else max_new
        cap = max(1, min(cap, limit - len(prompt_ids)))
        out, reason = plan_answer(
            prompt_ids,
            cap,
            ignore_eos=ignore_eos,
            seed=self.args.random_seed,
            answer_len=self.args.answer_len,
            reasoning=int(getattr(self.args, "sim_reasoning_tokens", 0) or 0),
        )
        return SimRequest(rid=uuid.uuid4().hex, input_ids=prompt_ids, output_ids=out, finish_reason=reason)

    @staticmethod
    def _hint(request: web.Request) -> ClientHint | None:
        """The load generator's lockstep header (lockstep.py), if it sent one."""
        try:
            return parse_hint(request.headers.get(LOCKSTEP_HEADER))
        except BadHint as e:
            raise BadRequest(str(e)) from None

    def _decode(self, ids: list[int]) -> str:
        """Answer text: vocabulary words, with the reasoning span's `<think>`/`</think>` spelled out."""
        if not any(i in THINK_IDS for i in ids):
            return self.tok.decode(ids)
        return " ".join(THINK_IDS[i] if i in THINK_IDS else self.tok.decode([i]) for i in ids)

    def _check_auth(self, request: web.Request) -> web.Response | None:
        key = self.args.api_key
        if not key or request.path.startswith(("/health", "/metrics")):
            return None
        if request.headers.get("Authorization", "") != f"Bearer {key}":
            return web.json_response({"error": "Unauthorized"}, status=401)
        return None

    def _gate(self, request: web.Request) -> tuple[web.Response | None, RequestFaults]:
        """Auth, readiness and the fault dice for a generation request."""
        denied = self._check_auth(request)
        if denied is not None:
            return denied, RequestFaults()
        if not self._ready():
            return _error(503, "The server is not ready yet."), RequestFaults()
        f = self.faults.on_request()
        if f.crash:
            self.logger.write(
                f"serve-sim: fault injection: crashing after {self.faults.crash_after} requests", "error"
            )
            os._exit(1)
        if f.http_status is not None:
            return _error(f.http_status, f"fault injection: HTTP {f.http_status}"), f
        return None, f

    def _finish_stats(self, req: SimRequest) -> None:
        """/metrics' TTFT and end-to-end histograms, in modelled (virtual) seconds like every sim figure."""
        if req.first_token_time is not None:
            self.ttft.observe(req.first_token_time - req.arrival)
        self.e2e.observe(self._e2e(req))

    def _e2e(self, req: SimRequest) -> float:
        end = req.finish_time if req.finish_time is not None else self.model_now()
        return max(0.0, end - req.arrival)

    async def _generate_events(
        self, request: web.Request, req: SimRequest, faults: RequestFaults, hint: ClientHint | None = None
    ) -> AsyncIterator[tuple[int, bool]]:
        """Yield (token count so far, finished) as the engine produces tokens (token_chunks)."""
        await self.hang.gate()  # --fault-hicache prefetch-hang: the request never reaches the scheduler
        async for chunk in token_chunks(self.live, req, faults, self.faults.stall_s, hint):  # noqa: UP028
            yield chunk

    # --- handlers: control -----------------------------------------------------------------
    async def health(self, request: web.Request) -> web.StreamResponse:
        if self.faults.health_stopped():
            await asyncio.sleep(3600)
        if not self._ready():
            return web.Response(status=503)
        return web.Response(status=200)

    async def health_generate(self, request: web.Request) -> web.StreamResponse:
        if self.faults.health_stopped():
            await asyncio.sleep(3600)
        if not self._ready():
            return web.Response(status=503)
        async for _ in token_chunks(self.live, self._make_request([0], 1, True, 1), RequestFaults(), 0.0):
            pass  # one token generated, as SGLang's /health_generate does
        return web.Response(status=200)

    async def get_server_info(self, request: web.Request) -> web.StreamResponse:
        return self._check_auth(request) or web.json_response(self.server_info())

    async def get_model_info(self, request: web.Request) -> web.StreamResponse:
        return self._check_auth(request) or web.json_response(introspect.model_info(self.args))

    async def models(self, request: web.Request) -> web.StreamResponse:
        return self._check_auth(request) or web.json_response(
            introspect.model_list(self.model_name, self.config.context_length)
        )

    async def flush_cache(self, request: web.Request) -> web.StreamResponse:
        denied = self._check_auth(request)
        if denied is not None:
            return denied
        queue, running = self.engine.pending_counts()
        if self.faults.crash_on_flush:  # what SGLang 0.5.23 with a storage backend printed, then died
            self.faults.die_at_flush(self.logger.write)
        if self.faults.refuse_flush() or not self.engine.flush():
            self.logger.warning(flush_refused_line(queue, running))
            return web.Response(text=FLUSH_MESSAGE, status=400)
        self.logger.info(FLUSH_OK_LINE)
        return web.Response(text=FLUSH_MESSAGE, status=200)

    async def metrics(self, request: web.Request) -> web.StreamResponse:
        if not self.args.enable_metrics:
            raise web.HTTPNotFound()
        text = render(self._snapshot(), self.ttft, self.e2e, self.model_name)
        return web.Response(text=text, content_type="text/plain", charset="utf-8", headers={"X-Sim": "1"})

    # --- handlers: generation --------------------------------------------------------------
    async def _body(self, request: web.Request) -> dict[str, Any]:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise BadRequest("The request body is not valid JSON.") from None
        if not isinstance(body, dict):
            raise BadRequest("The request body must be a JSON object.")
        return body

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._openai(request, chat=True)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._openai(request, chat=False)

    def _openai_prompt(self, body: dict[str, Any], chat: bool) -> list[int]:
        """Token ids of a chat's rendered messages or a completion's prompt (text or ids)."""
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise BadRequest("messages must be a non-empty list.")
            if getattr(self.args, "sim_chat_template", "verbatim") == "drop-reasoning":
                messages = drop_reasoning(messages)
            return self.tok.encode(render_chat(messages))
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and all(isinstance(x, int) for x in prompt):
            return list(prompt)
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            return self.tok.encode(prompt[0])
        if isinstance(prompt, str):
            return self.tok.encode(prompt)
        raise BadRequest("prompt must be a string or a list of token ids.")

    async def _openai(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        denied, faults = self._gate(request)
        if denied is not None:
            return denied
        try:
            body = await self._body(request)
            hint = self._hint(request)
            max_new = body.get("max_completion_tokens", body.get("max_tokens"))
            req = self._make_request(
                self._openai_prompt(body, chat),
                max_new,
                bool(body.get("ignore_eos", False)),
                OPENAI_DEFAULT_CAP,
            )
            req.priority = request_priority(body)
        except (BadRequest, PriorityError) as e:
            return _error(400, str(e))
        shape = OpenAIShape(
            chat, ("chatcmpl-" if chat else "cmpl-") + req.rid, int(time.time()), self.model_name
        )
        if not body.get("stream"):
            async for _ in self._generate_events(request, req, faults, hint):
                pass
            self._finish_stats(req)
            if req.abort_message is not None:
                return _abort_error(req.abort_message)
            text = self._decode(req.output_ids[: req.generated])
            return web.json_response(shape.completion(req, text, self._usage(req)))
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return await self._openai_stream(request, req, faults, hint, shape, include_usage)

    async def _openai_stream(
        self,
        request: web.Request,
        req: SimRequest,
        faults: RequestFaults,
        hint: ClientHint | None,
        shape: OpenAIShape,
        include_usage: bool,
    ) -> web.StreamResponse:
        """SSE: the role event (chat), one delta per engine step, the final event, usage, [DONE]."""
        resp = web.StreamResponse(status=200, headers=SSE_HEADERS)
        await resp.prepare(request)
        sent = 0
        if shape.chat:
            await _sse(resp, shape.chunk("", None, role=True))
        async for n, finished in self._generate_events(request, req, faults, hint):
            if n > sent:
                piece = self._decode(req.output_ids[sent:n])
                await _sse(resp, shape.chunk(" " + piece if sent > 0 else piece, None))
                sent = n
                if await self._mid_stream_faults(request, resp, req, faults, sent):
                    return resp
            if finished:
                break
        await _sse(resp, shape.final_chunk(req))
        if include_usage:
            await _sse(resp, shape.usage_chunk(self._usage(req)))
        await resp.write(b"data: [DONE]\n\n")
        self._finish_stats(req)
        await resp.write_eof()
        return resp

    async def _mid_stream_faults(
        self,
        request: web.Request,
        resp: web.StreamResponse,
        req: SimRequest,
        faults: RequestFaults,
        sent: int,
    ) -> bool:
        """Malformed events and dropped connections half-way through an answer; True if the stream is over."""
        half = max(1, len(req.output_ids) // 2)
        if sent < half:
            return False
        if faults.malformed:
            faults.malformed = False
            await resp.write(b'data: {"id": "broken", "choices": [\n\n')
        if faults.drop:
            self.live.abort(req)
            if request.transport is not None:
                request.transport.abort() if hasattr(
                    request.transport, "abort"
                ) else request.transport.close()
            return True
        return False

    def _usage(self, req: SimRequest) -> dict[str, Any]:
        return usage(req, bool(self.args.enable_cache_report))

    def _generate_prompt(self, body: dict[str, Any]) -> list[int]:
        if body.get("input_ids") is not None:
            ids = body["input_ids"]
            if not isinstance(ids, list) or not all(isinstance(x, int) for x in ids):
                raise BadRequest("input_ids must be a list of integers.")
            return list(ids)
        if isinstance(body.get("text"), str):
            return self.tok.encode(body["text"])
        raise BadRequest("Either text or input_ids should be provided.")

    async def generate(self, request: web.Request) -> web.StreamResponse:
        denied, faults = self._gate(request)
        if denied is not None:
            return denied
        try:
            body = await self._body(request)
            hint = self._hint(request)
            sp = body.get("sampling_params") or {}
            if not isinstance(sp, dict):
                raise BadRequest("sampling_params must be an object.")
            req = self._make_request(
                self._generate_prompt(body),
                sp.get("max_new_tokens", GENERATE_DEFAULT_MAX_NEW),
                bool(sp.get("ignore_eos")),
                GENERATE_DEFAULT_MAX_NEW,
            )
            req.priority = request_priority(body)
        except (BadRequest, PriorityError) as e:
            return _error(400, str(e))
        if not body.get("stream"):
            async for _ in self._generate_events(request, req, faults, hint):
                pass
            self._finish_stats(req)
            if req.abort_message is not None:
                return _abort_error(req.abort_message)
            return web.json_response(self._generate_payload(req, req.generated))
        resp = web.StreamResponse(status=200, headers=SSE_HEADERS)
        await resp.prepare(request)
        async for n, _finished in self._generate_events(request, req, faults, hint):
            await _sse(resp, self._generate_payload(req, n))
            if await self._mid_stream_faults(request, resp, req, faults, n):
                return resp
        await resp.write(b"data: [DONE]\n\n")
        self._finish_stats(req)
        await resp.write_eof()
        return resp

    def _generate_payload(self, req: SimRequest, n: int) -> dict[str, Any]:
        """/generate's body: the text so far (cumulative), its ids and meta_info."""
        return {
            "text": self._decode(req.output_ids[:n]),
            "output_ids": req.output_ids[:n],
            "meta_info": meta_info(req, self._e2e(req), storage_class(self.engine)),
        }

    # --- app -------------------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        r = app.router
        r.add_get("/health", self.health)
        r.add_get("/health_generate", self.health_generate)
        for path in ("/get_server_info", "/server_info"):
            r.add_get(path, self.get_server_info)
        r.add_get("/get_model_info", self.get_model_info)
        r.add_get("/model_info", self.get_model_info)
        r.add_get("/v1/models", self.models)
        r.add_route("GET", "/flush_cache", self.flush_cache)
        r.add_route("POST", "/flush_cache", self.flush_cache)
        r.add_get("/metrics", self.metrics)
        r.add_post("/v1/chat/completions", self.chat_completions)
        r.add_post("/v1/completions", self.completions)
        r.add_post("/generate", self.generate)
        app.on_startup.append(self._on_startup)
        app.on_cleanup.append(self._on_cleanup)
        return app

    async def _on_startup(self, _app: web.Application) -> None:
        self.live.wake = asyncio.Event()
        self._loop_task = asyncio.create_task(self._engine_loop())

    async def _on_cleanup(self, _app: web.Application) -> None:
        for task in [self._loop_task, *self._bg]:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self.logger.close()


def _error(status: int, message: str) -> web.Response:
    kind = {400: "BadRequestError", 500: "InternalServerError", 503: "ServiceUnavailableError"}.get(
        status, "Error"
    )
    return web.json_response(
        {"object": "error", "message": message, "type": kind, "param": None, "code": status}, status=status
    )


def _abort_error(message: str) -> web.Response:
    """A scheduler abort with a status (the queue limit) on a non-streamed request: 0.5.23's tokenizer
    manager raises HTTPException(503) (`_handle_abort_finish_reason`) and the server answers its
    ErrorResponse, type the status code as a string."""
    body = {"object": "error", "message": message, "type": "503", "param": None, "code": 503}
    return web.json_response(body, status=503)


async def _sse(resp: web.StreamResponse, obj: dict[str, Any]) -> None:
    await resp.write(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")
