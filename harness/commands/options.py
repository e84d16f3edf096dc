"""Options several subcommands share (`bench`, `run`), defined once so their names, defaults and help agree."""

from __future__ import annotations

import argparse
import socket


def add_node(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--node", default=socket.gethostname().split(".")[0], help="node name (default: this host)"
    )


def add_only(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="run only sweep points where KEY equals VALUE (repeatable)",
    )
