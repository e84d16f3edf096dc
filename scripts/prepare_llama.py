#!/usr/bin/env python3
"""Prepare the real server: build llama.cpp's llama-server (cached by version) and make the tiny model.

Prints each step and its duration; a failed step names itself and why, exit 2.
Usage: .venv/bin/python scripts/prepare_llama.py [--version 0.3.36] [--jobs N] [--no-model]
"""

from __future__ import annotations

import argparse
import sys
import time

from harness.errors import HarnessError
from harness.realserver import LLAMA_CPP_VERSION
from harness.realserver.model import make_model
from harness.realserver.prepare import prepare_server


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="prepare_llama.py", description=__doc__.splitlines()[0])
    p.add_argument(
        "--version",
        default=LLAMA_CPP_VERSION,
        help=f"llama-cpp-python sdist version (default {LLAMA_CPP_VERSION})",
    )
    p.add_argument("--jobs", type=int, default=None, help="parallel compile jobs (default: all cores)")
    p.add_argument("--no-model", action="store_true", help="build the server only")
    args = p.parse_args(argv)
    t0 = time.monotonic()
    try:
        server = prepare_server(args.version, jobs=args.jobs)
        model = None if args.no_model else make_model()
    except HarnessError as e:
        print(f"prepare_llama: error: {e}", file=sys.stderr)
        return e.exit_code
    print(
        f"llama-server: {server.binary} ({'reused' if server.reused else 'built'}; build took {server.build_seconds or 0:.0f} s)"
    )
    if model is not None:
        print(f"model:        {model.gguf}")
        print(f"tokenizer:    {model.tokenizer}")
    print(f"total:        {time.monotonic() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
