"""`harness serve-sim`: start the embedded SGLang-compatible simulated server and run it until a signal."""

from __future__ import annotations

import argparse
import asyncio
import signal
from typing import Any

from harness.sim.args import build_parser as _build_parser


def build_parser(prog: str = "harness serve-sim") -> argparse.ArgumentParser:
    return _build_parser(prog)


def run(args: argparse.Namespace) -> int:
    return asyncio.run(serve(args))


async def serve(args: Any) -> int:
    """Run until SIGTERM/SIGINT; returns the exit code."""
    from aiohttp import web

    from harness.sim.server import SimServer

    server = SimServer(args)
    server.startup_lines()
    runner = web.AppRunner(server.app(), access_log=None, handle_signals=False, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, args.host, args.port, reuse_address=True)
    try:
        await site.start()
    except OSError as e:
        await runner.cleanup()
        from harness.errors import HarnessError

        raise HarnessError(
            f"--port {args.port}: cannot listen on {args.host}:{args.port}: {e.strerror or e}"
        ) from None
    sockets = getattr(site._server, "sockets", None) or []  # noqa: SLF001
    server.port = sockets[0].getsockname()[1] if sockets else args.port
    server.logger.info(
        f"INFO:     Uvicorn running on http://{args.host}:{server.port} (Press CTRL+C to quit)"
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    ready_task = asyncio.create_task(server._announce_ready())
    server._bg.add(ready_task)
    await stop.wait()
    server.logger.info("Received shutdown signal; shutting down.")
    await runner.cleanup()
    return 0
