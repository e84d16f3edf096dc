"""The what-if replay's input from a capture point, for every tokenizer (issue 23 item 5): in-process.

A capture is written here the way the load generator writes one (the prompt built from the schedule and
the answers so far, its sha1, the server's answer ids), so the replay can be checked to be of exactly
the ids sent -- and to refuse, in one line, what it cannot rebuild.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.errors import HarnessError
from harness.sim.answers import answer_ids
from harness.whatif.inputs import read_capture

SIM = {"engine": "harness serve-sim"}
SGLANG = {"version": "0.5.23", "max_total_num_tokens": 4096}  # a real server's info: no `engine`


def _spec(tokenizer: str, api: str) -> dict[str, Any]:
    return {
        "name": "cap",
        "model": "m",
        "api": api,
        "tokenizer": tokenizer,
        "concurrency": 1,
        "seeds": [4],
        "workload": {
            "kind": "multi-turn",
            "sessions": 3,
            "turns": 3,
            "system_prompt_tokens": 12,
            "question_tokens": 5,
            "answer_tokens": 6,
        },
    }


def _capture(
    tmp: Path, raw: dict[str, Any], ids_of, answer_of, *, ids_back: bool
) -> tuple[Path, list[list[int]], list[list[int]]]:
    """A point folder as the load generator leaves it, one session turn after another (c=1); returns it
    with the ids the server saw per request and its answers, in send order. ids_of: payload -> the
    server's ids; answer_of: (ids, n) -> the answer's ids; ids_back: the server returned output_ids."""
    from harness.spec import parse_spec
    from harness.tokenizer import WordTokenizer
    from harness.workloads import build_schedule
    from harness.workloads.prompts import PromptBuilder, Turnout

    spec = parse_spec(raw, "spec.yaml", base_dir=tmp)
    schedule = build_schedule(spec, None, 4)
    builder = PromptBuilder(schedule, spec.api)
    exp = tmp / "capture" / "n" / "cap"
    point = exp / "srv" / "seed=4"
    point.mkdir(parents=True)
    (exp / "manifest.json").write_text(json.dumps({"spec": raw}))
    hist: dict[int, list[Turnout]] = {}
    lines, sent, answers = [], [], []
    word = WordTokenizer()
    turns = sorted(((c, r) for c in schedule.conversations for r in c.turns), key=lambda cr: cr[1].index)
    for t, (conv, r) in enumerate(turns):
        prompt = builder.build(conv, r, hist.setdefault(conv.id, []))
        ids = ids_of(prompt.payload)
        ans = answer_of(ids, r.output_tokens)
        text = word.decode(ans)
        hist[conv.id].append(Turnout(answer=text, answer_ids=tuple(ans), completion_tokens=len(ans)))
        rec = {"index": r.index, "seed": 4, "sent_mono": float(t), "prompt_sha": prompt.sha, "answer": text}
        rec |= {"prompt_tokens": len(ids), "completion_tokens": len(ans), "ok": True}
        if ids_back:
            rec["answer_ids"] = ans
        lines.append(json.dumps(rec))
        sent.append(ids)
        answers.append(ans)
    (point / "requests.jsonl").write_text("\n".join(lines) + "\n")
    return point, sent, answers


def _rewrite(point: Path, change) -> None:
    f = point / "requests.jsonl"
    rows = [json.loads(line) for line in f.read_text().splitlines()]
    change(rows)
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def test_server_tokenizer_replays_the_ids_sent_and_the_ids_answered(tmp_path: Path) -> None:
    raw = _spec("server", "sglang-generate")
    point, sent, answers = _capture(tmp_path, raw, list, lambda ids, n: answer_ids(ids, n, 0), ids_back=True)
    trace = read_capture(point, SIM)
    assert [list(r.key) for r in trace.requests] == sent
    assert [list(r.output_key) for r in trace.requests] == answers
    assert all(isinstance(x, int) and x >= 1000 for x in sent[0])  # ids, not word-tokenized text
    # a later turn resends its session's history: the earlier prompt and answer, verbatim
    by_session: dict[int | None, list] = {}
    for r in trace.requests:
        by_session.setdefault(r.session, []).append(r)
    for turns in by_session.values():
        for a, b in zip(turns, turns[1:], strict=False):
            assert b.key[: len(a.key) + len(a.output_key)] == a.key + a.output_key
    assert read_capture(point).requests == trace.requests  # the folder's own server_info, or the sim's

    _rewrite(point, lambda rows: rows[4].pop("answer_ids"))
    with pytest.raises(HarnessError, match="no answer_ids"):
        read_capture(point, SIM)


def test_a_prompt_that_is_not_the_one_sent_is_refused(tmp_path: Path) -> None:
    raw = _spec("server", "sglang-generate")
    point, _sent, _ans = _capture(tmp_path, raw, list, lambda ids, n: answer_ids(ids, n, 0), ids_back=True)

    def tamper(rows: list[dict]) -> None:
        rows[3]["answer_ids"] = [5, 6, 7]  # turn 1's history is then not what was sent after it

    _rewrite(point, tamper)
    with pytest.raises(HarnessError, match="prompt_sha differs"):
        read_capture(point, SIM)


def test_word_text_on_the_sim_still_replays_and_counts_are_checked(tmp_path: Path) -> None:
    from harness.tokenizer import WordTokenizer
    from harness.whatif.inputs import _prompt_ids

    word = WordTokenizer()
    raw = _spec("word", "openai-chat")
    point, sent, _ans = _capture(
        tmp_path, raw, lambda p: _prompt_ids(p, word), lambda ids, n: answer_ids(ids, n, 0), ids_back=False
    )
    assert [list(r.key) for r in read_capture(point, SIM).requests] == sent
    with pytest.raises(HarnessError, match="word text sent to"):
        read_capture(point, SGLANG)
    _rewrite(point, lambda rows: rows[2].update(prompt_tokens=rows[2]["prompt_tokens"] + 1))
    with pytest.raises(HarnessError, match="the server counted"):
        read_capture(point, SIM)


def _bos_tokenizer(path: Path) -> Path:
    """A word-level tokenizer.json over the word vocabulary whose post-processor adds a BOS, as a Llama's."""
    tokenizers = pytest.importorskip("tokenizers")  # the `real` extra, installed by `make`
    from harness.tokenizer import VOCAB

    vocab = {"[UNK]": 0, "<s>": 1, **{w: i + 2 for i, w in enumerate(dict.fromkeys(VOCAB))}}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(["[UNK]", "<s>"])
    tok.post_processor = tokenizers.processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", 1)]
    )
    tok.save(str(path))
    return path


def test_local_tokenizer_text_replays_as_the_server_tokenizes_it(tmp_path: Path) -> None:
    """Text sent to a real server: the local tokenizer with the BOS the server adds; output ids when the
    server returned them; chat messages refused (the server's chat template is not known offline)."""
    from harness.workloads.tokenizers import load_tokenizer

    tok_file = _bos_tokenizer(tmp_path / "tokenizer.json")
    tok = load_tokenizer(str(tok_file))
    raw = _spec(str(tok_file), "sglang-generate")

    def server_ids(payload: Any) -> list[int]:
        return list(tok._tok.encode(payload, add_special_tokens=True).ids)  # type: ignore[union-attr]

    point, sent, answers = _capture(
        tmp_path,
        raw,
        server_ids,
        lambda ids, n: [7 + (i * 31 + len(ids)) % 900 for i in range(n)],
        ids_back=True,
    )
    trace = read_capture(point, SGLANG)
    assert [list(r.key) for r in trace.requests] == sent and all(s[0] == 1 for s in sent)
    assert [list(r.output_key) for r in trace.requests] == answers

    chat = tmp_path / "chat"
    chat.mkdir()
    raw = _spec(str(tok_file), "openai-chat")
    point, _s, _a = _capture(chat, raw, lambda p: [1], lambda ids, n: [9] * n, ids_back=False)
    with pytest.raises(HarnessError, match="chat template"):
        read_capture(point, SGLANG)
