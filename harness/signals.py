"""How a stop signal (Ctrl-C, SIGTERM, SIGHUP) becomes a stop: the one rule, written once.

Outside a running load the handler raises KeyboardInterrupt, so `with` blocks unwind, flush and stop
servers. Inside one (`within_loop`) the loop takes the signal (`loop.add_signal_handler`) and cancels
the run's main task, so the run unwinds by cancellation and nothing is ever raised inside a transport
callback (uvloop reports that as a fatal transport error, and the stop went wrong one run in seven).
A second signal while the first unwinds raises KeyboardInterrupt at once, from the loop.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any, TypeVar

T = TypeVar("T")
STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_Handler = Callable[[int, Any], Any] | int | None


def interrupt(signum: int, frame: Any = None) -> None:
    """The Python-level handler: the signal as KeyboardInterrupt, named (cli prints it and exits 130)."""
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def caused_by_stop(e: BaseException) -> bool:
    """A stop signal that landed inside code turning exceptions into others: an extension module's import
    raises `ImportError: initialization failed` from the KeyboardInterrupt (seen in CI's signal stress)."""
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, KeyboardInterrupt):
            return True
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return False


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def install() -> None:
    """SIGTERM/SIGHUP raise KeyboardInterrupt from here on, as Ctrl-C does (main thread only).

    A SIGINT ignored since exec (a `cmd &` in a script or CI job: the shell sets it so) is made
    KeyboardInterrupt again: ignored, Ctrl-C / kill -INT was silently lost and the run went on to exit 0.
    A SIGHUP ignored on purpose (nohup) stays ignored."""
    if not _main_thread():
        return
    sys.unraisablehook = _unraisable
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:  # asyncio.run then leaves it ignored too
        signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if sig == signal.SIGHUP and signal.getsignal(sig) == signal.SIG_IGN:
            continue
        signal.signal(sig, interrupt)


_default_unraisable = sys.unraisablehook


def _unraisable(info: Any) -> None:
    """A stop that landed inside a weakref callback or a __del__ is swallowed by the interpreter (printed
    as "Exception ignored", the command went on to exit 0): sent again, from a thread once this hook has
    returned, so it lands in the command's own code. Anything else goes to the default hook."""
    exc = info.exc_value
    if not isinstance(exc, KeyboardInterrupt):
        _default_unraisable(info)
        return
    name = str(exc).removeprefix("signal ")
    sig = signal.Signals[name] if name in signal.Signals.__members__ else signal.SIGINT
    again = threading.Timer(0.05, os.kill, (os.getpid(), sig))  # once this hook has returned
    again.daemon = True
    again.start()


@contextlib.contextmanager
def shielded(*sigs: signal.Signals) -> Iterator[None]:
    """Ignore these signals for the block (e.g. while clocks are reset), then restore their handlers."""
    if not _main_thread():  # signals land only in the main thread: nothing to shield elsewhere
        yield
        return
    old = {s: signal.signal(s, signal.SIG_IGN) for s in sigs}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def exit_now(code: int) -> None:
    """Run the exit handlers (servers stopped), flush, and exit with `code` without the interpreter's
    shutdown: there a Ctrl-C already caught and turned into 130 still ended the process by SIGINT (-2),
    in 6 of 24 late Ctrl-Cs of `harness bench` (tests/helpers/signal_stress.py)."""
    _ignore_stops()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _exit_now(signum: int, frame: Any) -> None:
    """A stop signal after the command's work: exit 130 quietly, servers stopped."""
    _ignore_stops()
    print(f"harness: interrupted ({signal.Signals(signum).name}) while exiting", file=sys.stderr)
    exit_now(130)


def finishing() -> None:
    """From here the process only exits: a stop signal must not raise inside the interpreter's shutdown
    (thread joins, atexit), where it ended the process by the signal (-2) instead of with 130."""
    if not _main_thread():
        return
    for sig in STOP_SIGNALS:
        if signal.getsignal(sig) != signal.SIG_IGN:
            signal.signal(sig, _exit_now)
    # the exit handlers run last; once they start, the interpreter soon drops every Python-level handler
    # and a signal would end the process by its default action (-2): ignored from here, the exit code
    # stays the command's
    atexit.register(_ignore_stops)


def _ignore_stops() -> None:
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


@contextlib.contextmanager
def held() -> Iterator[list[int]]:
    """Hold stop signals for the block and hand them to the caller, who decides what a stop then means (a
    partial result written before exiting 130). A second signal stops at once."""
    got: list[int] = []
    if not _main_thread():
        yield got
        return

    def hold(signum: int, frame: Any) -> None:
        if got:
            interrupt(signum)
        got.append(signum)

    old = {s: signal.signal(s, hold) for s in STOP_SIGNALS if signal.getsignal(s) != signal.SIG_IGN}
    try:
        yield got
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Hold a stop signal until the block ends, then raise it: for the short bookkeeping that must not be
    cut in half (a point's counters and point.json after its load). A second signal stops at once."""
    with held() as got:
        yield
    if got:
        interrupt(got[0])


class LoopStop:
    """The stop signals of one running loop: the first cancels the main task, a second raises at once."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.task: asyncio.Task[Any] | None = None
        self.received: signal.Signals | None = None
        self.saved: dict[signal.Signals, _Handler] = {}

    def wrap(self, main: Awaitable[T]) -> Coroutine[Any, Any, T]:
        """main, run as the task a signal cancels."""

        async def _main() -> T:
            self.task = asyncio.current_task()
            return await main

        return _main()

    def _on_signal(self, sig: signal.Signals) -> None:
        if self.received is not None or self.task is None or self.task.done():
            raise KeyboardInterrupt(f"signal {sig.name}")  # the second: stop at once
        self.received = sig
        self.task.cancel()

    def install(self) -> None:
        for sig in STOP_SIGNALS:
            old = signal.getsignal(sig)
            if old == signal.SIG_IGN and sig != signal.SIGINT:  # nohup's SIGHUP stays ignored
                continue
            self.saved[sig] = old
            self.loop.add_signal_handler(sig, self._on_signal, sig)

    def restore(self) -> None:
        """Remove the loop's handlers and put the previous Python-level ones back (the loop would set
        SIG_DFL / default_int_handler, not what was there)."""
        for sig, old in self.saved.items():
            with contextlib.suppress(Exception):
                self.loop.remove_signal_handler(sig)
            signal.signal(sig, old if old is not None else signal.SIG_DFL)
        self.saved.clear()


@contextlib.contextmanager
def within_loop(loop: asyncio.AbstractEventLoop) -> Iterator[LoopStop]:
    """Signals go through `loop` for the block; a run cancelled by one leaves as KeyboardInterrupt."""
    stop = LoopStop(loop)
    if _main_thread():
        stop.install()
    try:
        yield stop
    except asyncio.CancelledError:
        if stop.received is None:
            raise
        raise KeyboardInterrupt(f"signal {stop.received.name}") from None
    finally:
        stop.restore()
    if stop.received is not None:  # the run caught its cancellation and returned: still a stop
        raise KeyboardInterrupt(f"signal {stop.received.name}")
