"""One sim behind the three kinds of Server (harness.servers.server): a launched process, the same URL
attached, and what the sweep asks of each (flush, counters, log slices, fingerprint, dry-run lines)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.capture import METRICS_AFTER, METRICS_BEFORE
from harness.servers.attached import Attached
from harness.servers.process import ServerError, ServerProcess
from harness.servers.replicas import ReplicaGroup
from harness.servers.server import Server
from harness.spec.servers import parse_servers

pytestmark = pytest.mark.slow  # starts a sim


def _sim(tmp_path: Path, args: list[str] | None = None) -> ServerProcess:
    (prof,) = parse_servers(
        [{"name": "s", "launch": "sim", "args": args or ["--enable-metrics"]}], None, "s.yaml"
    )
    return ServerProcess(prof, tmp_path / "s")


def _kinds(server: Server) -> Server:
    return server  # mypy checks each kind against the protocol here


def test_a_launched_sim_and_the_same_url_attached_answer_the_sweep_alike(tmp_path: Path) -> None:
    with _sim(tmp_path) as proc:
        att = _kinds(Attached(proc.base_url, name="a", server_dir=tmp_path / "a")).start()
        launched = _kinds(proc)
        assert att.info is not None and (tmp_path / "a" / "server_info.json").exists()
        for server, fresh in ((launched, True), (att, False)):
            assert server.alive() and server.fresh is fresh and server.worker_urls() is None
            assert server.flush({}) == (True, None)
            pdir = tmp_path / f"p-{server.name}"
            pdir.mkdir()
            server.scrape(pdir, "before", {})
            server.scrape(pdir, "after", {})
            assert "sglang:" in (pdir / METRICS_BEFORE).read_text() and (pdir / METRICS_AFTER).exists()
        mark = launched.log_mark()
        assert len(mark) == 1 and att.log_mark() == ()
        assert launched.log_lines_since((0,), "") and att.log_lines_since((), "") == []
        assert launched.log_lines_since(launched.log_mark(), "") == []  # nothing written since
        assert launched.fingerprint() == proc.fingerprint() and att.fingerprint() != launched.fingerprint()
        assert launched.describe(str)[0].startswith("  server s [sim]: ")
        assert att.describe(str) == [f"  server a [attach]: attach {proc.base_url}"]
        with pytest.raises(ServerError, match="not restarted"):
            att.restart()
    assert not launched.alive()
    assert launched.exit_cause(mark) is not None and att.exit_cause(()) is None


def test_storage_envs_name_what_a_fresh_l3_launch_renews(tmp_path: Path) -> None:
    l3 = ["--enable-hierarchical-cache", "--hicache-storage-backend", "file"]
    assert _sim(tmp_path).storage_envs() == []
    one = _sim(tmp_path, l3)
    assert one.storage_envs() == [(one.extra_env, "s")]
    raw = {"name": "g", "launch": "sim", "args": l3, "replicas": 2}
    for storage, names in (("own", ["g-w0", "g-w1"]), ("shared", ["g"])):
        (prof,) = parse_servers([{**raw, "storage": storage}], None, "s.yaml")
        group = ReplicaGroup(prof, tmp_path / "g")
        assert [n for _env, n in group.storage_envs()] == names
        assert group.log_mark() == (0, 0) and group.worker_urls() == {}
    assert Attached("http://127.0.0.1:1").storage_envs() == []
