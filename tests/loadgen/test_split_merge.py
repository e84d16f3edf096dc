"""A split run's records merge (harness.loadgen.split): whole lines only, in worker order, files removed."""

from __future__ import annotations

from harness.loadgen.split import _merge, shares


def test_merge_keeps_whole_lines_across_read_boundaries(tmp_path):
    line = b'{"x":"' + b"y" * 1000 + b'"}\n'
    n = (1 << 20) // len(line) + 3  # a killed worker's partial last line straddles a 1 MiB read
    a, b, out = tmp_path / "requests.w0.jsonl", tmp_path / "requests.w1.jsonl", tmp_path / "requests.jsonl"
    a.write_bytes(line * n + b'{"partial')
    b.write_bytes(b'{"b":1}\n')
    out.write_bytes(b'{"warmup":true}\n')  # what was there before (a warm-up) stays first
    _merge([a, b, tmp_path / "requests.w2.jsonl"], out)  # a worker that never wrote has no file
    assert out.read_bytes() == b'{"warmup":true}\n' + line * n + b'{"b":1}\n'
    assert not a.exists() and not b.exists()


def test_the_cap_is_split_exactly():
    for c in (3, 4, 64, 257):
        for n in range(1, min(c, 9) + 1):
            parts = shares(c, n)
            assert sum(parts) == c and max(parts) - min(parts) <= 1 and min(parts) >= 1
