"""The `harness` command: one subcommand per module, imported only when chosen so `--help` stays fast."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from harness import __version__, signals
from harness.errors import HarnessError

# name -> (module exposing build_parser(prog) -> ArgumentParser and run(args) -> int, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("harness.commands.run", "run a spec's points x seeds against a server someone already started"),
    "bench": ("harness.commands.bench", "launch servers from profiles, sweep, summarize, report, validate"),
    "fleet": ("harness.commands.fleet", "bench every node group of a Ray cluster, compare"),
    "serve-sim": ("harness.sim.cli", "start the embedded SGLang-compatible simulated server"),
    "parse-log": ("harness.commands.parse_log", "parse an SGLang server log into records and a summary"),
    "summarize": ("harness.commands.summarize", "turn capture folders into summaries/<node>.json"),
    "report": ("harness.commands.report", "Markdown tables and PNG charts from a summary"),
    "compare": ("harness.commands.compare", "ratios between two summaries"),
    "validate": ("harness.commands.validate", "clock-floor and throttle verdicts for a summary"),
    "gpu": ("harness.commands.gpu", "what NVML sees now, or why it sees nothing"),
    "whatif": ("harness.commands.whatif", "replay a trace through SGLang's cache semantics offline"),
    "advise": ("harness.commands.advise", "HiCache or not, which policy, how big a pool: from your traffic"),
}


def _top_parser() -> argparse.ArgumentParser:
    width = max(len(n) for n in COMMANDS)
    epilog = "commands:\n" + "\n".join(f"  {n:<{width}}  {h}" for n, (_, h) in COMMANDS.items())
    epilog += "\n\nexit codes: 0 ok, 1 something was flagged or failed, 2 bad input"
    p = argparse.ArgumentParser(
        prog="harness",
        description="Benchmark the prefix caches of LLM servers.",
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"harness {__version__}")
    p.add_argument("command", choices=list(COMMANDS), metavar="COMMAND", help="one of the commands below")
    p.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    name = ""  # the command, once parsed: an error or a stop names it
    try:  # all of it, the top parser and the import too: a Ctrl-C at any moment is a stop like any other
        argv = list(sys.argv[1:] if argv is None else argv)
        top = _top_parser()
        if not argv:
            top.print_help()
            return 2
        ns = top.parse_args(argv)
        name = ns.command
        module = importlib.import_module(COMMANDS[name][0])
        parser: argparse.ArgumentParser = module.build_parser(f"harness {name}")
        args = parser.parse_args(ns.args)
        return int(module.run(args) or 0)
    except HarnessError as e:
        print(f"harness {name}: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"harness{' ' + name if name else ''}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as e:
        if not signals.caused_by_stop(e):
            raise
        print(f"harness{' ' + name if name else ''}: interrupted", file=sys.stderr)
        return 130


def entry() -> None:
    """The process's entry point (`harness`, `python -m harness`): a stop signal stops any command as
    Ctrl-C does (exit 130, records kept), also one that lands while the process exits."""
    signals.install()
    rc = main()
    signals.finishing()
    if rc == 130:  # interrupted: records and point.json are written, servers stop in the exit handlers
        signals.exit_now(rc)
    raise SystemExit(rc)


if __name__ == "__main__":
    entry()
