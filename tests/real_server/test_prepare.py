"""The preparation's failure messages and cache keying, checked without a build."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.realserver import LLAMA_CPP_VERSION, prepare
from harness.realserver.prepare import PrepareError, cache_dir, cached_binary, prepare_server

pytestmark = [pytest.mark.real_server, pytest.mark.slow]  # they start processes
REPO = Path(__file__).resolve().parents[2]


def test_cache_folder_is_keyed_by_version_and_overridable(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    assert cache_dir("0.3.36") == tmp_path / "llama-cpp-0.3.36"
    assert cache_dir("0.3.35") != cache_dir("0.3.36")
    assert cached_binary() is None  # nothing built under a fresh root


def test_malformed_version_fails_before_any_work(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    with pytest.raises(PrepareError) as err:
        prepare_server("latest", log=None)
    assert err.value.step == "version"
    assert "'latest'" in str(err.value)
    assert list(tmp_path.iterdir()) == []


def test_unknown_version_fails_at_download_and_leaves_no_trace(tmp_path, monkeypatch):
    """A wrong version stops at the download step (seconds), never reaches a build."""
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    r = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "prepare_llama.py"), "--version", "0.0.1"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert r.returncode == 2, r.stdout + r.stderr
    err = r.stderr.strip().splitlines()[-1]
    assert err.startswith("prepare_llama: error: prepare step 'download' failed:")
    assert "llama-cpp-python==0.0.1" in err
    assert "Traceback" not in r.stderr
    assert "[prepare] download ..." in r.stdout
    assert "[prepare] build" not in r.stdout
    assert not (tmp_path / "llama-cpp-0.0.1").exists()


def test_missing_tools_without_root_names_the_packages(tmp_path, monkeypatch):
    monkeypatch.setattr(prepare.shutil, "which", lambda name: None)
    monkeypatch.setattr(prepare.os, "geteuid", lambda: 1000)
    with pytest.raises(PrepareError) as err:
        prepare._step_tools(tmp_path)
    assert err.value.step == "tools" and err.value.unobtainable
    assert "apt-get install -y cmake ninja-build g++" in str(err.value)
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    ok, why = prepare.can_prepare()
    assert not ok and "cmake" in why


def test_download_messages_name_the_cause():
    offline = (
        "WARNING: Retrying ... NewConnectionError('Failed to establish a new connection')\nERROR: No matching"
    )
    assert "cannot reach the package index" in prepare._download_why("x", offline, "0.3.36")
    missing = "ERROR: Could not find a version that satisfies ... (from versions: 0.1.0, 0.3.36)"
    assert "is not on the package index" in prepare._download_why("x", missing, "9.9.9")
    assert prepare._download_why("pip broke", "something else", "0.3.36") == "pip broke"


def test_failed_build_step_names_itself_and_its_log(tmp_path):
    log = tmp_path / "build.log"
    with pytest.raises(PrepareError) as err:
        prepare._run(
            "build", [sys.executable, "-c", "import sys; print('boom: no such target'); sys.exit(3)"], log=log
        )
    msg = str(err.value)
    assert msg.startswith("prepare step 'build' failed:")
    assert "exited 3" in msg and str(log) in msg and "boom: no such target" in msg


@pytest.mark.parametrize("name", ["llama-real.yaml", "llama-real-chat.yaml"])
def test_specs_point_at_the_default_cache_paths(name, tmp_path, monkeypatch):
    """The YAML's paths are where prepare/model put things: {cache}, which $HARNESS_CACHE moves."""
    from harness.realserver.model import model_dir
    from harness.spec import load_spec
    from harness.spec.servers import parse_servers

    raw = yaml.safe_load((REPO / "workloads" / name).read_text())
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    key = model_dir().name
    assert raw["tokenizer"] == f"{{cache}}/{key}/tokenizer.json"
    srv = raw["servers"][0]
    assert srv["model"] == f"{{cache}}/{key}/tiny.gguf"
    assert srv["command"][0] == f"{{cache}}/llama-cpp-{LLAMA_CPP_VERSION}/build/bin/llama-server"
    for flag in ("-np", "--cache-ram", "--metrics"):
        assert flag in srv["command"]
    # the plain spec loader fills {cache} (the tokenizer must exist there for the spec to load)
    (tmp_path / key).mkdir(parents=True)
    (tmp_path / key / "tokenizer.json").write_text("{}")
    spec = load_spec(REPO / "workloads" / name)
    assert spec.tokenizer == str(tmp_path / key / "tokenizer.json")
    (prof,) = parse_servers(spec.servers_raw, spec.matrix_raw, name)
    assert prof.launch == "command" and prof.health_path == "/health"
    assert prof.command[0] == str(
        tmp_path / f"llama-cpp-{LLAMA_CPP_VERSION}" / "build" / "bin" / "llama-server"
    )
    assert prof.model == str(tmp_path / key / "tiny.gguf")
