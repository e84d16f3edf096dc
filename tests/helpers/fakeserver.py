"""A scripted streaming server for tests and the client-ceiling benchmark (not a simulator).

Speaks OpenAI chat/completions and SGLang /generate with known delays, usage and cached tokens
(longest common word prefix with an earlier prompt), plus fault modes triggered by a marker in
the prompt: FAULT_500, FAULT_MALFORMED, FAULT_DROP, FAULT_HANG, FAULT_ERROR_EVENT. `--metrics-script FILE`
serves scripted /metrics pages instead of its own two counters (an independent server for the health
verdicts): JSON {"pages": [{"after_requests": N, "metrics": {"name{labels}": value, ...}}, ...]}; the page
shown is the last whose after_requests <= the requests received so far; `*_total` names are typed counters.
Run: python tests/helpers/fakeserver.py --port 0 [--ttft-ms 20 --itl-ms 5]  -> prints "PORT <n>".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass, field

from aiohttp import web

from harness.tokenizer import render_chat

_dumps = json.JSONEncoder(separators=(",", ":")).encode


@dataclass
class Config:
    ttft_ms: float = 0.0
    itl_ms: float = 0.0
    keepalive: bool = False  # send ": ping" before the first token
    stamp: bool = False  # first token is "t<monotonic send time>" (client-overhead benchmark)
    stamp_all: bool = False  # every token is "t<monotonic send time> " (timing tests under load)
    flush_busy: int = 0  # the first N /flush_cache calls answer 400 "pending requests"
    no_flush: bool = False
    no_metrics: bool = False
    record_prompts: bool = False
    cache: bool = True
    timings: bool = False  # llama.cpp-style `timings` in the final chunk
    say_on_request: str = ""  # a line printed to stdout (the server's log) at every request
    metrics_pages: list = field(default_factory=list)  # --metrics-script: [(after_requests, {name: value})]


@dataclass
class State:
    requests: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    flush_calls: int = 0
    prompts: list = field(default_factory=list)
    by_head: dict = field(default_factory=dict)
    cached_total: int = 0


class FakeServer:
    def __init__(self, cfg: Config) -> None:
        self.cfg, self.st = cfg, State()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/generate", self.generate)
        app.router.add_post("/flush_cache", self.flush)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/health", self.health)
        app.router.add_get("/stats", self.stats)
        app.router.add_post("/reset", self.reset)
        return app

    # ---------------------------------------------------------------- control
    async def health(self, _r: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def stats(self, _r: web.Request) -> web.Response:
        s = self.st
        return web.json_response(
            {
                "requests": s.requests,
                "in_flight": s.in_flight,
                "max_in_flight": s.max_in_flight,
                "flush_calls": s.flush_calls,
                "prompts": s.prompts,
                "cached_total": s.cached_total,
            }
        )

    async def reset(self, _r: web.Request) -> web.Response:
        self.st = State()
        return web.Response(text="ok")

    async def flush(self, _r: web.Request) -> web.Response:
        if self.cfg.no_flush:
            raise web.HTTPNotFound()
        self.st.flush_calls += 1
        if self.st.flush_calls <= self.cfg.flush_busy or self.st.in_flight:
            return web.Response(
                status=400,
                text="Cache not flushed because there are pending requests. #queue-req: 0, #running-req: 1",
            )
        self.st.by_head.clear()
        return web.Response(text="Cache flushed successfully!")

    async def metrics(self, _r: web.Request) -> web.Response:
        if self.cfg.no_metrics:
            raise web.HTTPNotFound()
        s = self.st
        if self.cfg.metrics_pages:
            return web.Response(
                text=scripted_page(self.cfg.metrics_pages, s.requests), content_type="text/plain"
            )
        text = (
            f"# TYPE sglang:num_requests_total counter\nsglang:num_requests_total {s.requests}\n"
            f"# TYPE sglang:cached_tokens_total counter\nsglang:cached_tokens_total {s.cached_total}\n"
        )
        return web.Response(text=text, content_type="text/plain")

    # ---------------------------------------------------------------- generation
    async def chat(self, r: web.Request) -> web.StreamResponse:
        body = await r.read()
        req = json.loads(body)
        text = render_chat(req.get("messages") or [])
        return await self._serve(r, body, "chat", text, req.get("max_tokens") or 16)

    async def completions(self, r: web.Request) -> web.StreamResponse:
        body = await r.read()
        req = json.loads(body)
        return await self._serve(
            r, body, "completions", str(req.get("prompt", "")), req.get("max_tokens") or 16
        )

    async def generate(self, r: web.Request) -> web.StreamResponse:
        body = await r.read()
        req = json.loads(body)
        sp = req.get("sampling_params") or {}
        if "input_ids" in req:
            text = " ".join(f"<{i}>" for i in req["input_ids"])
        else:
            text = str(req.get("text", ""))
        return await self._serve(r, body, "generate", text, sp.get("max_new_tokens") or 16)

    def _usage(self, text: str) -> tuple[int, int]:
        words = text.split()
        cached = 0
        if self.cfg.cache and words:
            head = tuple(words[:4])
            prev = self.st.by_head.get(head)
            if prev is not None:
                for a, b in zip(words, prev, strict=False):
                    if a != b:
                        break
                    cached += 1
                cached = min(cached, len(words) - 1)
            self.st.by_head[head] = words
        self.st.cached_total += cached
        return len(words), cached

    async def _serve(self, r: web.Request, body: bytes, api: str, text: str, n: int) -> web.StreamResponse:
        st = self.st
        st.requests += 1
        rid = st.requests
        fault = None
        if b"FAULT_" in body:
            for f in ("FAULT_500", "FAULT_MALFORMED", "FAULT_DROP", "FAULT_HANG", "FAULT_ERROR_EVENT"):
                if f in text:
                    fault = f
                    break
        if fault == "FAULT_500":
            return web.json_response({"error": {"message": "scripted failure"}}, status=500)
        if self.cfg.record_prompts:
            st.prompts.append(text)
        if self.cfg.say_on_request:
            print(self.cfg.say_on_request, flush=True)
        prompt_tokens, cached = self._usage(text)
        st.in_flight += 1
        st.max_in_flight = max(st.max_in_flight, st.in_flight)
        try:
            return await self._stream(r, api, rid, n, prompt_tokens, cached, fault)
        finally:
            st.in_flight -= 1

    def _events(self, api: str, rid: int, n: int, prompt_tokens: int, cached: int):
        """Yield (is_token, bytes) for the whole stream in order."""
        pieces = []
        cum = ""
        for i in range(n):
            pieces.append(f" w{rid}x{i}" if i else f"w{rid}x{i}")
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": n,
            "total_tokens": prompt_tokens + n,
            "prompt_tokens_details": {"cached_tokens": cached},
        }
        if api == "chat":
            yield (
                False,
                _sse(
                    {
                        "id": f"c{rid}",
                        "object": "chat.completion.chunk",
                        "model": "fake",
                        "choices": [
                            {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
                        ],
                    }
                ),
            )
            for i, p in enumerate(pieces):
                yield (
                    True,
                    (
                        p,
                        lambda p, last: _sse(
                            {
                                "id": f"c{rid}",
                                "object": "chat.completion.chunk",
                                "model": "fake",
                                "choices": [
                                    {
                                        "index": 0,
                                        "delta": {"content": p},
                                        "finish_reason": "length" if last else None,
                                    }
                                ],
                            }
                        ),
                        i == n - 1,
                    ),
                )
            final = {
                "id": f"c{rid}",
                "object": "chat.completion.chunk",
                "model": "fake",
                "choices": [],
                "usage": usage,
            }
        elif api == "completions":
            for i, p in enumerate(pieces):
                yield (
                    True,
                    (
                        p,
                        lambda p, last: _sse(
                            {
                                "id": f"c{rid}",
                                "object": "text_completion",
                                "model": "fake",
                                "choices": [
                                    {"index": 0, "text": p, "finish_reason": "length" if last else None}
                                ],
                            }
                        ),
                        i == n - 1,
                    ),
                )
            final = {
                "id": f"c{rid}",
                "object": "text_completion",
                "model": "fake",
                "choices": [],
                "usage": usage,
            }
        else:

            def gen_event(p, last, _cum=[""]):  # noqa: B006 - cumulative text across calls
                _cum[0] += p
                meta = {
                    "id": f"g{rid}",
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": len(_cum[0].split()),
                    "cached_tokens": cached,
                    "finish_reason": {"type": "length", "length": n} if last else None,
                }
                if last:
                    meta["cached_tokens_details"] = {"device": cached - cached // 4, "host": cached // 4}
                return _sse(
                    {
                        "text": _cum[0],
                        "output_ids": list(range(7000, 7000 + len(_cum[0].split()))),
                        "meta_info": meta,
                    }
                )

            del cum
            for i, p in enumerate(pieces):
                yield True, (p, gen_event, i == n - 1)
            final = None
        if final is not None:
            if self.cfg.timings:
                final["timings"] = {"cache_n": cached, "prompt_n": prompt_tokens - cached, "prompt_ms": 1.0}
            yield False, _sse(final)
        yield False, b"data: [DONE]\n\n"

    async def _stream(
        self, r: web.Request, api: str, rid: int, n: int, prompt_tokens: int, cached: int, fault: str | None
    ) -> web.StreamResponse:
        cfg = self.cfg
        fast = cfg.ttft_ms == 0 and cfg.itl_ms == 0 and fault is None and not cfg.keepalive
        if fast:  # zero delay: the whole stream in one write, stamped just before it
            parts = []
            first = True
            stamp = time.monotonic()
            for is_tok, ev in self._events(api, rid, n, prompt_tokens, cached):
                if is_tok:
                    p, fmt, last = ev
                    if first and cfg.stamp:
                        p = f"t{stamp:.7f}"
                    first = False
                    ev = fmt(p, last)
                parts.append(ev)
            return web.Response(body=b"".join(parts), content_type="text/event-stream")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(r)
        if cfg.keepalive:
            await resp.write(b": ping\n\n")
        t0 = time.monotonic()
        k = 0
        for is_tok, ev in self._events(api, rid, n, prompt_tokens, cached):
            if not is_tok:
                await resp.write(ev)
                continue
            p, fmt, last = ev
            due = t0 + (cfg.ttft_ms + k * cfg.itl_ms) / 1000.0
            if fault == "FAULT_HANG":
                await asyncio.sleep(3600)
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            if k == 1 and fault == "FAULT_MALFORMED":
                await resp.write(b'data: {"choices": [ {not json\n\n')
                await asyncio.sleep(0.05)
                return resp
            if k == 2 and fault == "FAULT_DROP":
                r.transport.abort()
                return resp
            if k == 1 and fault == "FAULT_ERROR_EVENT":
                await resp.write(_sse({"error": {"message": "scripted in-stream error"}}))
                await resp.write(b"data: [DONE]\n\n")
                return resp
            if cfg.stamp_all:
                p = f"t{time.monotonic():.7f} "
            elif k == 0 and cfg.stamp:
                p = f"t{time.monotonic():.7f}"
            await resp.write(fmt(p, last))
            k += 1
        await resp.write_eof()
        return resp


def read_metrics_script(path: str) -> list:
    """[(after_requests, {name: value})] in order, from a --metrics-script file."""
    with open(path, encoding="utf-8") as f:
        pages = json.load(f)["pages"]
    return sorted(((int(p["after_requests"]), dict(p["metrics"])) for p in pages), key=lambda p: p[0])


def scripted_page(pages: list, requests: int) -> str:
    """The Prometheus text of the last page due after `requests` requests (the first before any)."""
    metrics = pages[0][1]
    for after, m in pages:
        if after <= requests:
            metrics = m
    out, typed = [], set()
    for name, value in metrics.items():
        base = name.split("{", 1)[0]
        if base not in typed:
            typed.add(base)
            out.append(f"# TYPE {base} {'counter' if base.endswith('_total') else 'gauge'}")
        out.append(f"{name} {float(value)!r}")
    return "\n".join(out) + "\n"


def _sse(obj: dict) -> bytes:
    return b"data: " + _dumps(obj).encode() + b"\n\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--ttft-ms", type=float, default=0.0)
    ap.add_argument("--itl-ms", type=float, default=0.0)
    ap.add_argument("--keepalive", action="store_true")
    ap.add_argument("--stamp", action="store_true")
    ap.add_argument("--stamp-all", action="store_true")
    ap.add_argument("--flush-busy", type=int, default=0)
    ap.add_argument("--no-flush", action="store_true")
    ap.add_argument("--no-metrics", action="store_true")
    ap.add_argument("--record-prompts", action="store_true")
    ap.add_argument("--no-cache", action="store_true")
    ap.add_argument("--timings", action="store_true")
    ap.add_argument("--say-on-request", default="", help="print this line at every request")
    ap.add_argument("--metrics-script", default=None, help="JSON pages of /metrics (see the docstring)")
    a = ap.parse_args(argv)
    cfg = Config(
        ttft_ms=a.ttft_ms,
        itl_ms=a.itl_ms,
        keepalive=a.keepalive,
        stamp=a.stamp,
        stamp_all=a.stamp_all,
        flush_busy=a.flush_busy,
        no_flush=a.no_flush,
        no_metrics=a.no_metrics,
        record_prompts=a.record_prompts,
        cache=not a.no_cache,
        timings=a.timings,
        say_on_request=a.say_on_request,
        metrics_pages=read_metrics_script(a.metrics_script) if a.metrics_script else [],
    )
    asyncio.run(_serve_forever(FakeServer(cfg), a.host, a.port))


async def _serve_forever(server: FakeServer, host: str, port: int) -> None:
    runner = web.AppRunner(server.app(), access_log=None, handle_signals=True)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=1024)
    await site.start()
    sock = site._server.sockets[0]  # type: ignore[union-attr]
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


if __name__ == "__main__":
    sys.exit(main())
