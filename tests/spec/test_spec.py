"""Spec loading: the valid shape, sweep points, and one clear line for every kind of bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harness.errors import SpecError
from harness.spec import LogNormal, MultiTurnWorkload, SharedPrefixWorkload, ShareGPT, load_spec
from tests.helpers.cli import harness

ROOT = Path(__file__).resolve().parents[2]

BASE = {
    "name": "working-set",
    "api": "openai-chat",
    "model": "Qwen/Qwen3-8B",
    "tokenizer": "word",
    "concurrency": 8,
    "seeds": [0, 1, 2],
    "workload": {
        "kind": "shared-prefix",
        "groups": 16,
        "prompts_per_group": 8,
        "system_prompt_tokens": 2048,
        "question_tokens": 64,
        "output_tokens": 64,
    },
    "sweep": {"groups": [4, 16, 32, 64]},
}


def write(tmp_path: Path, spec: dict, name: str = "s.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(spec, sort_keys=False))
    return p


def with_(base: dict, path: str, value) -> dict:
    """Copy of base with a dotted key set (value None deletes it)."""
    import copy

    d = copy.deepcopy(base)
    keys = path.split(".")
    cur = d
    for k in keys[:-1]:
        cur = cur[k]
    if value is None:
        cur.pop(keys[-1], None)
    else:
        cur[keys[-1]] = value
    return d


def test_issue_example_loads_with_points(tmp_path):
    spec = load_spec(write(tmp_path, BASE))
    assert isinstance(spec.workload, SharedPrefixWorkload)
    assert spec.workload.groups == 16 and spec.workload.shuffle is True
    assert spec.seeds == [0, 1, 2] and spec.concurrency == 8
    assert spec.timeouts.connect == 10 and spec.timeouts.first_token == 300 and spec.timeouts.total == 600
    pts = spec.points()
    assert [p.sweep for p in pts] == [{"groups": g} for g in (4, 16, 32, 64)]
    assert [p.workload.groups for p in pts] == [4, 16, 32, 64]
    assert all(p.workload.prompts_per_group == 8 for p in pts)
    assert spec.raw["sweep"] == {"groups": [4, 16, 32, 64]}
    assert spec.source_path == tmp_path / "s.yaml"


def test_multi_turn_forms_and_two_key_sweep(tmp_path):
    (tmp_path / "sg.json").write_text('[{"conversations": [{"from": "human", "value": "hi there"}]}]')
    spec = with_(
        BASE,
        "workload",
        {
            "kind": "multi-turn",
            "sessions": 4,
            "turns": 3,
            "system_prompt_tokens": 100,
            "question_tokens": {"distribution": "lognormal", "mean": 50, "sigma": 0.4},
            "answer_tokens": 20,
            "history": "drop-reasoning",
        },
    )
    spec["sweep"] = {"sessions": [2, 4], "concurrency": [1, 8]}
    s = load_spec(write(tmp_path, spec))
    assert isinstance(s.workload, MultiTurnWorkload)
    assert s.workload.question_tokens == LogNormal(mean=50.0, sigma=0.4)
    assert s.workload.history == "drop-reasoning"
    pts = s.points()
    assert len(pts) == 4
    assert [(p.workload.sessions, p.concurrency) for p in pts] == [(2, 1), (2, 8), (4, 1), (4, 8)]
    spec["workload"]["question_tokens"] = {"sharegpt": "sg.json"}
    s2 = load_spec(write(tmp_path, spec))
    assert s2.workload.question_tokens == ShareGPT(path=tmp_path / "sg.json")


def test_servers_matrix_kept_raw_and_headers_resolved(tmp_path, monkeypatch):
    spec = dict(
        BASE,
        servers=[{"name": "a", "launch": "sim"}],
        matrix={"policy": ["lru", "slru"]},
        headers={"Authorization": "Bearer ${TEST_KEY_X}"},
        request_rate=12.5,
        timeouts={"first_token": 30},
    )
    monkeypatch.setenv("TEST_KEY_X", "s3cret")
    s = load_spec(write(tmp_path, spec))
    assert s.servers_raw == [{"name": "a", "launch": "sim"}] and s.matrix_raw == {"policy": ["lru", "slru"]}
    assert s.resolved_headers() == {"Authorization": "Bearer s3cret"}
    assert s.request_rate == 12.5 and s.timeouts.first_token == 30 and s.timeouts.total == 600
    assert "s3cret" not in str(s.redacted_raw()) and "${TEST_KEY_X}" not in str(s.redacted_raw())


BAD = [
    (with_(BASE, "workload.groups", 0), "workload.groups", "expected a positive integer, got 0"),
    (
        with_(BASE, "workload.question_tokens", -5),
        "workload.question_tokens",
        "expected a positive integer, got -5",
    ),
    (
        with_(BASE, "workload.system_prompt_tokens", -1),
        "workload.system_prompt_tokens",
        "non-negative integer, got -1",
    ),
    (
        with_(BASE, "workload.output_tokens", "many"),
        "workload.output_tokens",
        "expected a positive integer, got 'many'",
    ),
    (with_(BASE, "workload.grups", 3), "workload.grups", "unknown key"),
    (with_(BASE, "colour", "red"), "colour", "unknown key"),
    (with_(BASE, "api", "grpc"), "api", "expected one of openai-chat, openai-completions, sglang-generate"),
    (with_(BASE, "workload.kind", "zipf"), "workload.kind", "expected one of shared-prefix, multi-turn"),
    (with_(BASE, "workload.groups", None), "workload.groups", "missing"),
    (with_(BASE, "model", None), "model", "missing"),
    (with_(BASE, "concurrency", 0), "concurrency", "expected a positive integer, got 0"),
    (with_(BASE, "seeds", [0, "a"]), "seeds[1]", "non-negative integer"),
    (with_(BASE, "seeds", [1, 1]), "seeds", "distinct"),
    (with_(BASE, "sweep", {"grups": [1]}), "sweep.grups", "unknown key"),
    (with_(BASE, "sweep", {"groups": [4, 0]}), "sweep.groups[1]", "expected a positive integer, got 0"),
    (with_(BASE, "sweep", {"groups": 4}), "sweep.groups", "non-empty list"),
    (with_(BASE, "tokenizer", "/no/such/tokenizer"), "tokenizer", "does not exist"),
    (with_(BASE, "tokenizer", "server"), "tokenizer", "needs api: sglang-generate"),
    (
        with_(BASE, "workload.question_tokens", {"sharegpt": "missing.json"}),
        "workload.question_tokens.sharegpt",
        "file not found",
    ),
    (
        with_(BASE, "workload.question_tokens", {"distribution": "lognormal", "sigma": 1}),
        "workload.question_tokens.mean",
        "missing",
    ),
    (with_(BASE, "timeouts", {"connect": -1}), "timeouts.connect", "positive number"),
    (
        with_(BASE, "headers", {"Authorization": "${SURELY_UNSET_VAR_123}"}),
        "headers.Authorization",
        "not set",
    ),
    (with_(BASE, "max_failed_fraction", 2), "max_failed_fraction", "between 0 and 1"),
    (with_(BASE, "request_rate", 0), "request_rate", "positive number"),
    (with_(BASE, "workload.shuffle", "yes"), "workload.shuffle", "true or false"),
]


@pytest.mark.parametrize(("spec", "key", "msg"), BAD, ids=[b[1] + ":" + b[2][:20] for b in BAD])
def test_bad_spec_one_line(tmp_path, spec, key, msg):
    p = write(tmp_path, spec)
    with pytest.raises(SpecError) as e:
        load_spec(p)
    text = str(e.value)
    assert "\n" not in text
    assert text.startswith(f"{p}: {key}: "), text
    assert msg in text


def test_bad_yaml_and_missing_file(tmp_path):
    p = tmp_path / "x.yaml"
    p.write_text("name: [unclosed\n")
    with pytest.raises(SpecError, match=r"x\.yaml: not valid YAML \(line"):
        load_spec(p)
    with pytest.raises(SpecError, match="no such file"):
        load_spec(tmp_path / "nope.yaml")
    p.write_text("- a list\n")
    with pytest.raises(SpecError, match="expected a mapping at the top level"):
        load_spec(p)


@pytest.mark.slow
def test_cli_prints_one_line_and_exits_2(tmp_path):
    p = write(tmp_path, with_(BASE, "workload.groups", 0))
    r = harness("run", str(p), "--server-url", "http://127.0.0.1:9", timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0
    assert "workload.groups: expected a positive integer, got 0" in r.stderr
    assert "Traceback" not in r.stderr


def test_committed_smoke_spec_loads():
    s = load_spec(ROOT / "workloads" / "smoke.yaml")
    assert s.name == "smoke" and len(s.points()) >= 1


def test_sweep_over_question_distribution_names_points_cleanly(tmp_path):
    spec = with_(
        BASE, "sweep", {"question_tokens": [32, {"distribution": "lognormal", "mean": 64, "sigma": 0.5}]}
    )
    pts = load_spec(write(tmp_path, spec)).points()
    assert [p.sweep["question_tokens"] for p in pts] == [32, "lognormal-64-0.5"]
    assert isinstance(pts[1].workload.question_tokens, LogNormal)


def test_a_captured_spec_is_rebuilt_through_spec_with_its_defaults(tmp_path, monkeypatch):
    """The manifest keeps the spec as written; captured_spec parses it again, so a reader gets the run's
    types and defaults (block_tokens 512 and start 0 here, written nowhere but harness.spec)."""
    from harness.capture.manifest import load_manifest, write_manifest
    from harness.capture.redact import spec_redactor
    from harness.spec import TraceWorkload, captured_spec, point_of

    (tmp_path / "t.jsonl").write_text(
        '{"timestamp": 0, "input_length": 8, "output_length": 2, "hash_ids": [1]}\n'
    )
    raw = {**BASE, "workload": {"kind": "trace", "path": "t.jsonl"}, "sweep": {"limit": [1, 2]}}
    raw["headers"] = {"Authorization": "Bearer ${TOKEN}"}
    monkeypatch.setenv("TOKEN", "sk-secret")
    spec = load_spec(write(tmp_path, raw))
    edir = tmp_path / "capture" / "n" / spec.name
    write_manifest(edir, spec, "n", spec_redactor([spec]))
    manifest = load_manifest(edir)
    assert "sk-secret" not in str(manifest)

    monkeypatch.delenv("TOKEN")  # a reader needs no secret: the manifest's headers are redacted
    back = captured_spec(manifest, "manifest.json")
    assert back.points() == spec.points() and back.load == spec.load and back.seeds == spec.seeds
    wl = point_of(back, {"limit": 2}).workload
    assert isinstance(wl, TraceWorkload) and (wl.block_tokens, wl.start, wl.limit) == (512, 0, 2)
    assert wl.path == tmp_path / "t.jsonl"
    assert point_of(back, {"limit": "1"}).workload.limit == 1  # a folder name's text matches too
    assert point_of(back, {"limit": 3}) is None

    (tmp_path / "t.jsonl").unlink()  # the trace moved away: still readable, checked only when opened
    assert captured_spec(manifest, "manifest.json").workload.path == tmp_path / "t.jsonl"
    with pytest.raises(SpecError, match=r"manifest.json: workload.path: file not found"):
        captured_spec(manifest, "manifest.json", files=True)
    with pytest.raises(SpecError, match="spec: missing"):
        captured_spec({"experiment": "x"}, "manifest.json")
