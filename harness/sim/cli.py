"""`harness serve-sim`: start the embedded SGLang-compatible simulated server."""

from __future__ import annotations

import argparse
import asyncio

from harness.sim.args import build_parser as _build_parser


def build_parser(prog: str = "harness serve-sim") -> argparse.ArgumentParser:
    return _build_parser(prog)


def run(args: argparse.Namespace) -> int:
    from harness.sim.server import serve

    return asyncio.run(serve(args))
