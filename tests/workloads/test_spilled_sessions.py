"""A multi-turn schedule kept in a spill file (issue 29): every prompt and Request read back as drawn."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.spec import parse_spec
from harness.workloads import build_schedule
from harness.workloads.schedule import Request
from harness.workloads.spill import FLUSH_AT, SpillFile
from harness.workloads.spilled_sessions import BLOCK, STRIDE, PackedTurns, PromptStore, SpilledSessions
from harness.workloads.traffic import classed


def test_a_spill_folder_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(HarnessError, match=r"spill file in .*missing: .*set TMPDIR"):
        SpillFile(str(tmp_path / "missing"))


def test_spill_reads_back_what_is_still_buffered_and_what_is_on_disk() -> None:
    f = SpillFile()
    a = f.append(b"abc")
    assert f.read(a, 3) == b"abc"  # flushed on demand
    big = bytes(range(256)) * (FLUSH_AT // 128)
    b = f.append(big)
    c = f.append(b"tail")
    assert (a, b, c) == (0, 3, 3 + len(big))
    assert f.read(b, len(big)) == big and f.read(c, 100) == b"tail"
    f.close()


@pytest.mark.parametrize("ids", [False, True])
def test_store_gives_every_entry_back_by_number_and_in_order(ids: bool) -> None:
    rng = random.Random(3)
    entries = []
    for k in range(5 * STRIDE + 3):
        n = rng.choice([0, 1, 7, 300, BLOCK // 4 if k == 20 else 2])  # one entry past a read block
        if ids:
            entries.append((tuple(rng.randrange(1 << 40) for _ in range(n)), n))
        else:
            entries.append(("".join(rng.choice("aé中 ") for _ in range(n)), n + 1))
    store = PromptStore(ids=ids)
    for p, n in entries:
        store.add(p, n)
    assert [store.get(k) for k in range(len(entries))] == entries
    assert [store.get(k) for k in (40, 3, 40, 81)] == [entries[k] for k in (40, 3, 40, 81)]  # any order
    assert list(store.scan(0, len(entries))) == entries
    assert list(store.scan(17, 50)) == entries[17:50] and list(store.scan(9, 9)) == []


def _spec(tmp_path: Path, **extra: object):
    wl = {
        "kind": "multi-turn",
        "sessions": 7,
        "turns": 3,
        "system_prompt_tokens": 5,
        "question_tokens": {"distribution": "lognormal", "mean": 6, "sigma": 0.5},
        "answer_tokens": 4,
    }
    return parse_spec({"name": "t", "model": "m", "workload": wl, **extra}, str(tmp_path / "s.yaml"))


def test_conversations_and_requests_in_index_order_agree(tmp_path: Path) -> None:
    sch = build_schedule(_spec(tmp_path), None, 0)
    convs = sch.conversations
    assert isinstance(convs, SpilledSessions) and len(sch) == 21 and len(convs) == 7
    by_session = [r for c in convs for r in c.turns]
    assert sorted(by_session, key=lambda r: r.index) == list(sch.requests())
    assert [r.index for r in sch.requests()] == list(range(21))
    r = convs[2].turns[1]
    assert (r.index, r.conversation, r.turn, r.position, r.session, r.output_tokens) == (9, 2, 1, 1, 2, 4)
    assert convs[-1].system == list(convs)[6].system and convs[2].system_tokens == 5
    assert convs.count_part(1, 3) == 3 * 2  # sessions 1 and 4
    with pytest.raises(IndexError):
        convs[7]


def test_head_keeps_each_sessions_turns_up_to_n(tmp_path: Path) -> None:
    sch = build_schedule(_spec(tmp_path), None, 0)
    head = sch.head(10)  # row 0 (7) and sessions 0..2 of row 1
    got = sorted((r for c in head.conversations for r in c.turns), key=lambda r: r.index)
    assert got == list(sch.requests())[:10]
    assert [len(c.turns) for c in head.conversations] == [2, 2, 2, 1, 1, 1, 1]


def test_classes_are_drawn_per_session_as_for_any_schedule(tmp_path: Path) -> None:
    classes = [{"name": "high", "share": 1, "value": 10}, {"name": "low", "share": 2, "value": 0}]
    spec = _spec(tmp_path, priorities=classes)
    sch = build_schedule(spec, None, 5)
    plain = build_schedule(_spec(tmp_path), None, 5)
    want = [r for c in plain.conversations for r in classed(c, spec.priorities, 5).turns]
    got: list[Request] = [r for c in sch.conversations for r in c.turns]
    assert got == want and {r.priority_class for r in got} == {"high", "low"}


@pytest.mark.parametrize("tokenizer", ["word", "server"])
def test_packed_turns_read_back_as_the_spilled_ones(tmp_path: Path, tokenizer: str) -> None:
    api = "sglang-generate" if tokenizer == "server" else "openai-chat"
    sch = build_schedule(_spec(tmp_path, tokenizer=tokenizer, api=api), None, 0)
    convs = sch.conversations
    assert isinstance(convs, SpilledSessions)
    for s in (0, 4):
        packed = PackedTurns(convs, s)
        assert packed[1] == convs[s].turns[1]  # read out of order: earlier turns read on the way
        assert list(packed) == list(convs[s].turns) and len(packed) == 3 and packed[-1] == packed[2]
