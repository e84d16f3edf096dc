"""Shared fixtures: a real streaming HTTP server (tests/helpers/fakeserver.py) in its own process on a free port."""

from __future__ import annotations

import os
import subprocess
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.announce import set_config
from tests.helpers.procs import FakeServerProcess
from tests.helpers.procs import free_port as _free_port


def pytest_configure(config: pytest.Config) -> None:
    set_config(config)  # long fixture setups announce themselves past the output capture


@pytest.fixture
def fake_server_factory() -> Iterator:
    """Start fake servers with chosen options (e.g. "--ttft-ms", "30"); all stopped at teardown."""
    started: list[FakeServerProcess] = []

    def make(*args: str) -> FakeServerProcess:
        s = FakeServerProcess(*args)
        started.append(s)
        return s

    yield make
    for s in started:
        s.stop()


@pytest.fixture
def fake_server() -> Iterator[FakeServerProcess]:
    """A server streaming with a 20 ms TTFT and 5 ms between tokens, recording prompts; one per test
    (a shared one once died mid-suite on a loaded machine and took every later user down with it)."""
    s = FakeServerProcess("--ttft-ms", "20", "--itl-ms", "5", "--record-prompts")
    yield s
    s.stop()


@pytest.fixture
def free_port() -> int:
    """A port nothing listens on (bound then released) for refused-connection tests."""
    return _free_port()


# ------------------------------------------------------------------ the `slow` mark, enforced
# A test that starts a process (directly or through a fixture, even one set up by an earlier test)
# must carry `slow`, so `make check` stays a quick in-process loop. Allowed: the host facts the harness's
# manifest gathers itself (`git rev-parse HEAD`, `uname -p` behind platform.processor()), a few ms each, and
# matplotlib's one-time font discovery (`fc-list`, when ~/.cache/matplotlib has no font list yet: a fresh
# install or CI runner; refusing it left the list unwritten, so every chart test failed on every run).
_ALLOWED = ("git", "uname", "fc-list")
_spawning: set[int] = set()  # id() of fixture definitions whose setup started a process
_setting_up: list[Any] = []  # fixture definitions being set up now, innermost last
_unmarked: list[pytest.Item] = []  # the item running now when it is not marked slow
_execute_child = subprocess.Popen._execute_child  # type: ignore[attr-defined]


def _guarded_execute_child(self: subprocess.Popen, args: Any, *rest: Any, **kw: Any) -> Any:
    argv = [args] if isinstance(args, str | bytes) else list(args)
    if Path(str(argv[0])).name not in _ALLOWED:
        if _setting_up:
            _spawning.add(id(_setting_up[-1]))
        if _unmarked:
            pytest.fail(f"{_unmarked[0].nodeid} starts a process ({argv[:4]}) but is not marked slow")
    return _execute_child(self, args, *rest, **kw)


subprocess.Popen._execute_child = _guarded_execute_child  # type: ignore[attr-defined]


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: Any, request: pytest.FixtureRequest) -> Any:
    _setting_up.append(fixturedef)
    try:
        return (yield)
    finally:
        _setting_up.pop()


def _fixturedefs(item: pytest.Item) -> list[Any]:
    info = getattr(item, "_fixtureinfo", None)
    return [d for defs in (info.name2fixturedefs.values() if info else ()) for d in defs]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Any:
    if item.get_closest_marker("slow"):
        return (yield)
    for d in _fixturedefs(item):
        if id(d) in _spawning:
            pytest.fail(f"{item.nodeid} uses fixture {d.argname!r}, which starts a process: mark it slow")
    _unmarked.append(item)
    try:
        return (yield)
    finally:
        _unmarked.clear()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    if item.get_closest_marker("slow"):
        return (yield)
    _unmarked.append(item)
    try:
        return (yield)
    finally:
        _unmarked.clear()


# ------------------------------------------------------------------ two workers for `make test`
# `make test` runs two pytest-xdist workers (`-n 2 --dist loadscope --no-loadscope-reorder`). Each module
# is one unit, so its module fixtures start once; the folders that start real servers form two queues
# (SGLang's own server; llama.cpp, vLLM, transformers and Ray) that begin first, one per worker, so no
# two servers of one queue run at once and the in-process modules fill the gaps while servers load.
# tests/oracle (SGLang's tree in its venv, no server; the venv is built under a file lock) is one of
# those modules: the SGLang queue is the longer one.
_QUEUES = {
    "real_sglang": "sglang",
    "real_server": "real",
    "realserver": "real",
    "fleet": "real",
}


def _queue(nodeid: str) -> str:
    """The unit a test belongs to: its queue for the real-server folders, else its module."""
    path = nodeid.split("::", 1)[0]
    parts = path.split("/")
    return _QUEUES.get(parts[1], path) if len(parts) > 2 and parts[0] == "tests" else path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's scope scheduler with the queues as scopes (xdist_group marks cannot: pytest 9 ignores the
    node id suffix they rely on)."""
    from xdist.scheduler import LoadScopeScheduling

    class Queues(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return _queue(nodeid)

    return Queues(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The two queues first, in a worker; elsewhere (make check, a single file) collection order stays."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    order = list(dict.fromkeys(_QUEUES.values()))
    items.sort(key=lambda it: order.index(q) if (q := _queue(it.nodeid)) in order else len(order))  # stable


# ------------------------------------------------------------------ where `make test`'s time goes
# The controller sums each worker's test time per group (the two queues, the in-process modules) and notes
# when each worker finished, so a CI log shows which worker decides the wall time and by how much.
_session_t0 = time.monotonic()
_group_s: dict[tuple[str, str], float] = defaultdict(float)
_worker_done_s: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    node = getattr(report, "node", None)  # set on the controller's copy of a worker's report
    if node is None or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    group = (
        _QUEUES.get(report.nodeid.split("/")[1], "in-process")
        if report.nodeid.count("/") > 1
        else "in-process"
    )
    _group_s[(node.gateway.id, group)] += report.duration


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    _worker_done_s[node.gateway.id] = time.monotonic() - _session_t0


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _worker_done_s:
        return
    for worker, done in sorted(_worker_done_s.items()):
        groups = ", ".join(
            f"{g} {s / 60:.1f} min"
            for (w, g), s in sorted(_group_s.items(), key=lambda kv: -kv[1])
            if w == worker
        )
        terminalreporter.write_line(f"worker {worker}: done at {done / 60:.1f} min ({groups})")
