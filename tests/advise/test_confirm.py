"""`--confirm` on the sim: the top candidates launched through bench's plan and loop, the same spec, capture
or trace sent, measured within 2 points of predicted."""

from __future__ import annotations

import json

import pytest

from harness.cli import main
from tests.helpers.specs import TIMEOUTS, shared_prefix, write_spec


def _cand(policy="lru", pool=1000, ratio=0.0, storage="", policy_config=()):
    from harness.advise.grid import Candidate
    from harness.advise.physics import Modelled
    from harness.whatif.grid import Config
    from harness.whatif.replay import Result

    cfg = Config(policy, pool, ratio, "write_through", storage=storage, policy_config=policy_config)
    res = Result(cfg, 1, 100, 50, 50, 0, 100, 0, 0, 0, 0.0)
    return Candidate(cfg, res, Modelled({"mean": 1.0, "p50": 1.0, "p99": 1.0}, 1.0, 1.0, None, None))


def test_a_candidate_is_sglangs_flags_and_vllm_gets_its_pool_in_blocks():
    from harness.advise.confirm import server_args

    c = _cand("lru", 1500, 2.0, "file")
    assert server_args(c, 1, "sglang-cpu") == [
        "--enable-cache-report",
        "--max-total-tokens",
        "1500",
        "--radix-eviction-policy",
        "lru",
        "--enable-hierarchical-cache",
        "--hicache-ratio",
        "2",
        "--hicache-write-policy",
        "write_through",
        "--hicache-storage-backend",
        "file",
    ]
    assert server_args(_cand(pool=40), 16, "sim")[1:3] == ["--max-total-tokens", "640"]  # 40 blocks x 16
    # tlru's lengths are in the advice's unit (blocks): launched in the tokens sent live, as the pool is
    tlru = server_args(
        _cand("tlru", 40, policy_config=(("next_prompt_estimate", 13), ("threshold", 54))), 16, "sim"
    )
    assert json.loads(tlru[tlru.index("--radix-eviction-policy-config") + 1]) == {
        "next_prompt_estimate": 13 * 16,
        "threshold": 54 * 16,
    }
    assert server_args(_cand(pool=1000), 1, "vllm") == [  # 32-token blocks: vLLM's CPU build refuses 16
        "--num-gpu-blocks-override",
        "33",  # 32 for the pool and vLLM's null block
        "--block-size",
        "32",
        "--max-model-len",
        "1024",
        "--enforce-eager",
    ]


def test_vllm_takes_only_lru_device_pools():
    from types import SimpleNamespace

    from harness.advise.confirm import top

    cands = [_cand("lru", 1000, 2.0), _cand("lfu", 1000), _cand("lru", 2000), _cand("lru", 500)]
    a = SimpleNamespace(candidates=cands, recommendation=SimpleNamespace(chosen=cands[0]))
    assert top(a, 2, "sim")[0] is cands[0]  # the recommended first
    assert [c.config.pool for c in top(a, 3, "vllm")] == [2000, 500]  # no host tier, no lfu


def test_a_candidate_whose_run_failed_reads_as_failed_not_as_zero():
    from harness.advise.markdown import confirmed_row

    row = {"config": "lru, pool 10", "server_kind": "sglang-cpu", "predicted_hit_rate": 0.5}
    assert confirmed_row({**row, "measured_hit_rate": None})[3:] == ["run failed", "-"]
    assert confirmed_row({**row, "measured_hit_rate": 0.49})[2:] == ["50.0%", "49.0%", "-1.00 pt"]


def test_confirm_turns_sigterm_into_an_unwind_before_it_launches_anything(tmp_path, monkeypatch):
    import harness.advise.confirm as confirm_mod
    import harness.servers.process as process

    calls: list[str] = []
    monkeypatch.setattr(process, "install_signal_handlers", lambda: calls.append("handlers"))

    def fake_confirm(*a, **kw):  # where the servers would start
        from harness.advise.confirm_info import ConfirmInfo
        from harness.advise.confirm_progress import Estimate

        calls.append("confirm")
        return [], ConfirmInfo("sim", Estimate(None, "test"))

    monkeypatch.setattr(confirm_mod, "confirm", fake_confirm)
    wl = shared_prefix(
        groups=4, prompts_per_group=2, system_prompt_tokens=64, question_tokens=8, output_tokens=4
    )
    spec = write_spec(tmp_path, "sig", wl, tokenizer="word", concurrency=1, seeds=[0], timeouts=TIMEOUTS)
    args = ["advise", str(spec), "--card", "l4", "--pool", "3000", "--workers", "1", "--quiet"]
    assert main([*args, "-o", str(tmp_path / "a")]) == 0 and calls == []  # no --confirm: nothing launched
    assert main([*args, "--confirm", "1", "-o", str(tmp_path / "b")]) == 0
    assert calls == ["handlers", "confirm"]


@pytest.mark.slow  # starts three sim servers
def test_confirm_two_measures_within_two_points(tmp_path, capsys):
    wl = shared_prefix(
        groups=40, prompts_per_group=3, system_prompt_tokens=512, question_tokens=16, output_tokens=8
    )
    spec = write_spec(
        tmp_path,
        "conf",
        wl,
        tokenizer="word",
        concurrency=1,
        seeds=[0],
        api="openai-completions",
        timeouts=TIMEOUTS,
    )
    out = tmp_path / "out"
    rc = main(
        [
            "advise",
            str(spec),
            "--card",
            "l4",
            "--pool",
            "3000",
            "--host-memory",
            "64",
            "--workers",
            "1",
            "--confirm",
            "2",
            "-o",
            str(out),
            "--quiet",
        ]
    )
    assert rc == 0
    d = json.loads((out / "advise.json").read_text())
    conf = d["confirmed"]
    assert len(conf) == 2
    assert conf[0]["config"] != conf[1]["config"]
    assert any("host" in c["config"] for c in conf)  # a HiCache candidate, measured on a live host tier
    for c in conf:
        assert abs(c["measured_hit_rate"] - c["predicted_hit_rate"]) <= 0.02, c
        assert c["measured_hit_rate"] > 0.1  # the pool and the spec did share prefixes
    assert "Confirmed live" in (out / "advise.html").read_text()
    # each candidate's server log and capture are kept beside the advice, as bench lays them out
    assert len(list((out / "confirm" / "cap" / "advise").glob("conf/candidate-*/**/requests.jsonl"))) == 2
    assert {c["server_kind"] for c in conf} == {"sim"}

    # a capture point of that run is an input too: its manifest's spec, at its point and seed, sent again
    (point,) = [p.parent for p in (out / "confirm").glob("cap/advise/conf/candidate-1/*/requests.jsonl")]
    again = tmp_path / "again"
    argv = ["advise", str(point), "--card", "l4", "--host-memory", "0", "--workers", "1", "--confirm", "1"]
    assert main([*argv, "-o", str(again), "--quiet"]) == 0
    d2 = json.loads((again / "advise.json").read_text())
    assert d2["pools"]["current"] == d["recommendation"]["pool"]  # the captured server's own pool
    (c2,) = d2["confirmed"]
    assert (
        c2["measured_hit_rate"] > 0.1 and abs(c2["measured_hit_rate"] - c2["predicted_hit_rate"]) <= 0.02
    ), c2
    assert list((again / "confirm" / "cap" / "advise" / "conf").glob("candidate-1/*/requests.jsonl"))
    capsys.readouterr()


def _mooncake(path, n=48):
    """Conversations that come back: 6 sessions of 8 turns, each turn one block longer than the last."""
    lines = []
    for turn in range(8):
        for s in range(6):
            ids = [s * 100 + b for b in range(turn + 2)]
            lines.append(
                json.dumps(
                    {"hash_ids": ids, "input_length": len(ids) * 512, "output_length": 1, "timestamp": 0}
                )
            )
    path.write_text("\n".join(lines[:n]) + "\n")
    return path


@pytest.mark.slow  # starts a sim server
def test_confirm_on_a_mooncake_trace_replays_it_as_a_trace_workload(tmp_path, capsys):
    trace = _mooncake(tmp_path / "conv.jsonl")
    out = tmp_path / "out"
    argv = ["advise", str(trace), "--card", "l4", "--pool", "20", "--host-memory", "64", "--workers", "1"]
    rc = main([*argv, "--confirm", "1", "-o", str(out), "--quiet"])  # the sim: 16 tokens a block
    assert rc == 0
    d = json.loads((out / "advise.json").read_text())
    (c,) = d["confirmed"]
    assert c["measured_hit_rate"] > 0.3
    assert abs(c["measured_hit_rate"] - c["predicted_hit_rate"]) <= 0.02, c
    live = (out / "confirm" / "live-spec.yaml").read_text()
    # the trace shrunk to 16 tokens a block is sent with its answers shrunk alike: a copy of the file
    assert "kind: trace" in live and "block_tokens: 16" in live and "conv-answers-16of512.jsonl" in live
    assert d["confirm"]["block"] == {
        "block_tokens": 16,
        "trace_block_tokens": 512,
        "reason": "shrunk from 512: the sim: every id is sent, hashed and generated on this CPU",
        "answers_scaled": True,
    }
    assert d["confirm"]["partial"] is False and c["status"] == "ok"
    # the pool in blocks is sent as tokens: 20 blocks x 16 tokens
    argvs = json.loads((out / "confirm" / "cap" / "advise" / "advise-conv" / "manifest.json").read_text())
    args = argvs["servers"]["candidate-1"]["args"]
    assert args[args.index("--max-total-tokens") + 1] == str(d["recommendation"]["pool"] * 16)
    capsys.readouterr()


def test_sglang_on_a_gpu_is_sent_the_traces_full_size_blocks_and_says_why(tmp_path, monkeypatch, capsys):
    """No GPU here: the launch is intercepted where bench would start SGLang, after the live spec and the
    candidates' flags are made."""
    import harness.advise.confirm as confirm_mod
    import harness.servers.process as process

    seen: dict = {}

    def fake_plan(live, servers, launch, capture):
        seen.update(live=live, servers=servers)
        return confirm_mod.LiveRun(None, None, None, [capture / "never" for _ in servers])

    monkeypatch.setattr(confirm_mod, "plan_live", fake_plan)
    monkeypatch.setattr(confirm_mod.LiveRun, "run", lambda self, log=None: [None for _ in self.dirs])
    monkeypatch.setattr(process, "install_signal_handlers", lambda: None)
    trace = _mooncake(tmp_path / "conv.jsonl")
    model = tmp_path / "model"
    model.mkdir()
    out = tmp_path / "out"
    argv = ["advise", str(trace), "--card", "h100", "--pool", "20", "--host-memory", "0", "--workers", "1"]
    argv += [
        "--confirm",
        "1",
        "--server-kind",
        "sglang",
        "--server-model",
        str(model),
        "-o",
        str(out),
        "--quiet",
    ]
    assert main(argv) == 1  # the candidate never ran: failed, not 0%
    live = seen["live"]
    assert live.unit_tokens == 512 and live.spec.workload.block_tokens == 512
    assert live.spec.workload.path == trace.resolve()  # full size: the trace as it is, answers and all
    (server,) = seen["servers"]
    d = json.loads((out / "advise.json").read_text())
    args = server["args"]
    assert args[args.index("--max-total-tokens") + 1] == str(d["recommendation"]["pool"] * 512)
    assert d["confirm"]["block"] == {
        "block_tokens": 512,
        "trace_block_tokens": 512,
        "reason": "the trace's own block: SGLang on a GPU holds full-size prompts",
        "answers_scaled": False,
    }
    assert d["confirmed"][0]["status"] == "failed" and d["confirmed"][0]["measured_hit_rate"] is None
    assert "Live blocks: 512 tokens a hash id (the trace's own block" in (out / "advise.md").read_text()
    capsys.readouterr()
