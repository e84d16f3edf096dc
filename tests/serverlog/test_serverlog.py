"""Every SGLang log variant of docs/sglang-facts.md parses into the right record."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from harness import serverlog
from harness.cli import main
from harness.engines import logs

# The real lines, verbatim (an L4 and a GB10 node, and a published NPU log).
REAL = [
    "[2026-10-17 18:19:03] Prefill batch, #new-seq: 4, #new-token: 4096, #cached-token: 2196, token usage: 0.65, #running-req: 2, #queue-req: 0, #pending-token: 5234, cuda graph: True, input throughput (token/s): 1431.87",
    "[2026-10-17 17:34:02] Prefill batch, #new-seq: 3, #new-token: 4096, #cached-token: 0, token usage: 0.65, #running-req: 5, #queue-req: 0, #pending-token: 1138, cuda graph: True, input throughput (token/s): 1573.58",
    "[2026-10-17 19:52:36] Prefill batch, #new-seq: 7, #new-token: 476, #cached-token: 15146, token usage: 0.06, #running-req: 1, #queue-req: 0, #pending-token: 0, cuda graph: True, input throughput (token/s): 1605.53",
    "[2026-07-04 05:01:09 TP0] Prefill batch, #new-seq: 1, #new-token: 128, #cached-token: 70144, full token usage: 0.15, mamba usage: 0.02, #running-req: 0, #queue-req: 0, #pending-token: 0, npu graph: False, input throughput (token/s): 2.61",
]


def _one(line: str) -> serverlog.LogRecord:
    rec = logs.parse_line(line)
    assert rec is not None, line
    return rec


def test_real_lines_verbatim() -> None:
    recs = [_one(line) for line in REAL]
    assert [r.kind for r in recs] == ["prefill"] * 4
    assert [r.fields["new_token"] for r in recs] == [4096, 4096, 476, 128]
    assert [r.fields["cached_token"] for r in recs] == [2196, 0, 15146, 70144]
    assert recs[0].fields["pending_token"] == 5234
    assert recs[0].fields["graph"] is True and recs[0].fields["graph_kind"] == "cuda"
    assert recs[0].fields["input_throughput"] == pytest.approx(1431.87)
    assert recs[0].fields["token_usage"] == pytest.approx(0.65)
    assert recs[0].wall == datetime(2026, 10, 17, 18, 19, 3).timestamp() and not recs[0].ms
    npu = recs[3]
    assert npu.ranks == {"TP": 0}
    assert npu.fields["graph_kind"] == "npu" and npu.fields["graph"] is False
    assert npu.fields["full_token_usage"] == pytest.approx(0.15)
    assert npu.fields["mamba_usage"] == pytest.approx(0.02)
    assert all(r.line == line for r, line in zip(recs, REAL, strict=True))


def test_prefill_0_4_10_period_and_trailing_comma() -> None:
    r = _one(
        "[2025-08-01 10:00:00] Prefill batch. #new-seq: 1, #new-token: 128, #cached-token: 0, token usage: 0.01, #running-req: 0, #queue-req: 0, "
    )
    assert r.kind == "prefill"
    assert r.fields == {
        "new_seq": 1,
        "new_token": 128,
        "cached_token": 0,
        "token_usage": 0.01,
        "running_req": 0,
        "queue_req": 0,
    }


def test_prefill_0_5_5() -> None:
    r = _one(
        "[2025-11-01 10:00:00] Prefill batch, #new-seq: 2, #new-token: 300, #cached-token: 700, token usage: 0.12, #running-req: 1, #queue-req: 3, "
    )
    assert (r.fields["new_token"], r.fields["cached_token"], r.fields["queue_req"]) == (300, 700, 3)


def test_prefill_0_5_9_with_ms() -> None:
    r = _one(
        "[2026-02-01 10:00:00.250] Prefill batch, #new-seq: 1, #new-token: 64, #cached-token: 960, token usage: 0.30, #running-req: 0, #queue-req: 0, input throughput (token/s): 812.40, cuda graph: False"
    )
    assert r.ms and r.wall == pytest.approx(datetime(2026, 2, 1, 10, 0, 0).timestamp() + 0.25)
    assert r.fields["graph"] is False and r.fields["input_throughput"] == pytest.approx(812.4)


@pytest.mark.parametrize("word", ["cuda", "cpu", "npu", "musa"])
def test_prefill_0_5_23_replay_tflops_and_graph_words(word: str) -> None:
    r = _one(
        f"[2026-10-01 10:00:00 DP1 TP3] Prefill batch, #new-seq: 2, #new-token: 512, #cached-token: 1536, token usage: 0.40, #running-req: 4, #queue-req: 1, #pending-token: 77, #replay-token: 32, {word} graph: True, input throughput (token/s): 999.00, est. prefill TFLOPS/s (per GPU): 12.5"
    )
    assert r.fields["replay_token"] == 32 and r.fields["pending_token"] == 77
    assert r.fields["graph_kind"] == word and r.fields["graph"] is True
    assert r.fields["est_prefill_tflops"] == pytest.approx(12.5)
    assert r.ranks == {"DP": 1, "TP": 3}


def test_hybrid_swa_usage() -> None:
    r = _one(
        "[2026-10-01 10:00:00] Prefill batch, #new-seq: 1, #new-token: 8, #cached-token: 8, full token usage: 0.10, swa token usage: 0.50, #running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: True, input throughput (token/s): 1.00"
    )
    assert r.fields["swa_token_usage"] == pytest.approx(0.5) and "token_usage" not in r.fields


def test_all_rank_tags_process_tag_and_forward_iter() -> None:
    r = _one(
        "(SchedulerActor pid=123, ip=10.0.0.1) [2026-10-01 10:00:00.5 DP0 PP1 ATTN_CP2 MOE_DP3 TP4 EP5] Prefill batch [42], #new-seq: 1, #new-token: 16, #cached-token: 48, token usage: 0.01, #running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: True, input throughput (token/s): 3.00"
    )
    assert r.process == "(SchedulerActor pid=123, ip=10.0.0.1)"
    assert r.ranks == {"DP": 0, "PP": 1, "ATTN_CP": 2, "MOE_DP": 3, "TP": 4, "EP": 5}
    assert r.iter == 42 and r.fields["cached_token"] == 48
    d = _one(
        "[2026-10-01 10:00:01] Decode batch [43], #running-req: 1, #token: 100, token usage: 0.01, cuda graph: True, gen throughput (token/s): 50.00, #queue-req: 0"
    )
    assert d.kind == "decode" and d.iter == 43


def test_decode_variants() -> None:
    old = _one(
        "[2025-08-01 10:00:00] Decode batch. #running-req: 3, #token: 900, token usage: 0.09, cuda graph: True, gen throughput (token/s): 120.50, #queue-req: 0, "
    )
    mid = _one(
        "[2025-11-01 10:00:00] Decode batch, #running-req: 3, #token: 900, token usage: 0.09, cuda graph: True, gen throughput (token/s): 120.50, #queue-req: 0, "
    )
    new = _one(
        "[2026-02-01 10:00:00] Decode batch, #running-req: 3, #token: 900, token usage: 0.09, cuda graph: True, gen throughput (token/s): 120.50, #queue-req: 0"
    )
    spec = _one(
        "[2026-02-01 10:00:00] Decode batch, #running-req: 3, #token: 900, token usage: 0.09, accept len: 2.31, accept rate: 0.77, cuda graph: True, gen throughput (token/s): 240.10, #queue-req: 0"
    )
    for r in (old, mid, new, spec):
        assert r.kind == "decode" and r.fields["running_req"] == 3 and r.fields["token"] == 900
        assert r.fields["queue_req"] == 0
    assert spec.fields["accept_len"] == pytest.approx(2.31) and spec.fields["accept_rate"] == pytest.approx(
        0.77
    )
    assert "accept_len" not in new.fields


@pytest.mark.parametrize(
    ("line", "tokens", "label", "how"),
    [
        (
            "KV Cache is allocated. #tokens: 120000, K size: 5.49 GB, V size: 5.49 GB",
            120000,
            None,
            "is allocated",
        ),
        ("KV Cache is allocated. #tokens: 50000, KV size: 3.20 GB", 50000, None, "is allocated"),
        (
            "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 260013, K size: 11.90 GB, V size: 11.90 GB",
            260013,
            None,
            "is allocated",
        ),
        (
            "SWA KV Cache is allocated. dtype: torch.bfloat16, #tokens: 4096, K size: 0.10 GB, V size: 0.10 GB",
            4096,
            "SWA",
            "is allocated",
        ),
        (
            "KV Cache VA upper bound. dtype: torch.bfloat16, #tokens: 400000, K size: 18.00 GB, V size: 18.00 GB",
            400000,
            None,
            "VA upper bound",
        ),
        (
            "Post-capture KV sizing: KV cache allocated. dtype: torch.bfloat16, #tokens: 250000, K size: 11.40 GB, V size: 11.40 GB",
            250000,
            "Post-capture KV sizing",
            "allocated",
        ),
    ],
)
def test_kv_pool_variants(line: str, tokens: int, label: str | None, how: str) -> None:
    r = _one("[2026-10-01 10:00:00 TP0] " + line)
    assert r.kind == "kv_pool"
    assert r.fields["tokens"] == tokens and r.fields["label"] == label and r.fields["how"] == how


def test_kv_pool_sizes_in_gb() -> None:
    r = _one("[2026-10-01 10:00:00] KV Cache is allocated. #tokens: 120000, K size: 5.49 GB, V size: 5.50 GB")
    assert r.fields["k_size_gb"] == pytest.approx(5.49) and r.fields["v_size_gb"] == pytest.approx(5.5)


def test_host_pool_lines_and_scheduler_line() -> None:
    old = _one("[2026-02-01 10:00:00] Allocating 22.35 GB host memory for hierarchical KV cache.")
    new = _one(
        "[2026-10-01 10:00:00] Allocating kv hierarchical KV host pool: 96377 tokens, 14.21 GB host memory."
    )
    assert old.kind == new.kind == "host_pool"
    assert old.fields == {"tokens": None, "gb": 22.35, "label": None}
    assert new.fields == {"tokens": 96377, "gb": 14.21, "label": "kv"}
    s = _one(
        "[2026-10-01 10:00:00 TP0] max_total_num_tokens=260013, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=4096, context_len=32768, available_gpu_mem=10.25 GB"
    )
    assert s.kind == "scheduler"
    assert s.fields["max_total_num_tokens"] == 260013 and s.fields["context_len"] == 32768
    assert s.fields["available_gpu_mem"] == pytest.approx(10.25)


def test_ready_flush_and_prefetch() -> None:
    assert _one("[2026-10-01 10:00:00] The server is fired up and ready to roll!").kind == "ready"
    assert _one("[2026-10-01 10:00:00] Cache flushed successfully!").kind == "flush"
    refused = _one(
        "[2026-10-01 10:00:00] Cache not flushed because there are pending requests. #queue-req: 2, #running-req: 5"
    )
    assert refused.kind == "flush_refused" and refused.fields == {"queue_req": 2, "running_req": 5}
    for outcome in ("success", "dropped"):
        r = _one(
            f"[2026-10-01 10:00:00] HiCache prefetch {outcome} req=abc123 completed=512 matched=1024 loaded=512 occupied=0.35"
        )
        assert r.kind == "hicache_prefetch" and r.fields["outcome"] == outcome
        assert (
            r.fields["req"] == "abc123"
            and r.fields["completed"] == 512
            and r.fields["occupied"] == pytest.approx(0.35)
        )


def test_unknown_lines_counted_not_fatal(tmp_path) -> None:
    text = "\n".join(
        [
            "INFO:     Started server process [1234]",
            REAL[0],
            "garbage \x00 line",
            "[2026-10-01 10:00:00] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16",
            "",
            REAL[2],
        ]
    )
    path = tmp_path / "server.log"
    path.write_bytes(text.encode() + b"\n\xff\xfe broken bytes\n")
    log = logs.parse_file(path)
    assert len(log.records) == 2
    assert log.unknown == 4 and log.undecodable == 1 and log.lines == 7
    tot = serverlog.prefill_totals(log.records)
    assert tot == {
        "prefill_lines": 2,
        "new_tokens": 4096 + 476,
        "cached_tokens": 2196 + 15146,
        "hit_rate": pytest.approx((2196 + 15146) / (2196 + 15146 + 4096 + 476)),
    }


def test_pool_sizes_last_allocated_wins() -> None:
    lines = [
        "[2026-10-01 10:00:00] KV Cache VA upper bound. dtype: torch.bfloat16, #tokens: 400000, K size: 18.00 GB, V size: 18.00 GB",
        "[2026-10-01 10:00:01] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 260013, K size: 11.90 GB, V size: 11.90 GB",
        "[2026-10-01 10:00:02] Post-capture KV sizing: KV cache allocated. dtype: torch.bfloat16, #tokens: 250000, K size: 11.40 GB, V size: 11.40 GB",
        "[2026-10-01 10:00:03] Allocating kv hierarchical KV host pool: 96377 tokens, 14.21 GB host memory.",
        "[2026-10-01 10:00:04] max_total_num_tokens=250000, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=4096, context_len=32768, available_gpu_mem=10.25 GB",
    ]
    pools = serverlog.pool_sizes(logs.parse_lines(lines).records)
    assert pools["device_tokens"] == 250000 and pools["max_total_num_tokens"] == 250000
    assert pools["host_tokens"] == 96377 and pools["host_gb"] == pytest.approx(14.21)


def test_in_window_widens_by_slack() -> None:
    recs = logs.parse_lines(REAL[:3]).records  # 17:34:02, 18:19:03, 19:52:36
    t = datetime(2026, 10, 17, 18, 19, 3).timestamp()
    assert [r.fields["cached_token"] for r in serverlog.in_window(recs, t + 0.4, t + 5)] == [2196]
    assert list(serverlog.in_window(recs, t + 1.2, t + 5)) == []


def test_parse_log_cli(tmp_path, capsys) -> None:
    path = tmp_path / "server.log"
    path.write_text("\n".join(REAL + ["not a log line at all"]) + "\n")
    assert main(["parse-log", str(path), "--json"]) == 0
    out = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert len(out) == 5 and out[0]["kind"] == "prefill"
    summary = out[-1]["summary"]
    assert summary["by_kind"] == {"prefill": 4, "unknown": 1}
    assert summary["prefill"]["cached_tokens"] == 2196 + 0 + 15146 + 70144
    assert main(["parse-log", str(path)]) == 0
    text = capsys.readouterr().out
    assert "prefill: 4 lines" in text and "cached 87486 tokens" in text
    assert main(["parse-log", str(tmp_path / "absent.log")]) == 2
    assert "absent.log" in capsys.readouterr().err
