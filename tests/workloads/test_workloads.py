"""Workload generators: exact lengths, determinism per seed, disjoint seeds, send order, histories."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.errors import HarnessError, SpecError
from harness.spec import parse_spec
from harness.tokenizer import WordTokenizer, render_chat, strip_reasoning
from harness.workloads import PromptBuilder, build_schedule, load_prompt_maker
from harness.workloads.prompts import Turnout

WT = WordTokenizer()


def sp_spec(**wl):
    w = {
        "kind": "shared-prefix",
        "groups": 4,
        "prompts_per_group": 3,
        "system_prompt_tokens": 50,
        "question_tokens": 7,
        "output_tokens": 5,
        **wl,
    }
    return parse_spec({"name": "t", "model": "m", "workload": w})


def mt_spec(api="openai-chat", tokenizer="word", **wl):
    w = {
        "kind": "multi-turn",
        "sessions": 3,
        "turns": 4,
        "system_prompt_tokens": 30,
        "question_tokens": 6,
        "answer_tokens": 4,
        **wl,
    }
    return parse_spec({"name": "t", "model": "m", "api": api, "tokenizer": tokenizer, "workload": w})


def texts(schedule) -> list[str]:
    return [c.system + " " + r.question for c in schedule.conversations for r in c.turns]


def test_shared_prefix_shape_and_exact_lengths():
    s = build_schedule(sp_spec(), None, 0)
    assert len(s) == 12
    reqs = list(s.requests())
    assert [r.index for r in reqs] == list(range(12))
    by_group: dict[int, set] = {}
    for c in s.conversations:
        assert len(c.turns) == 1
        r = c.turns[0]
        assert len(WT.encode(c.system)) == 50 == c.system_tokens
        assert len(WT.encode(r.question)) == 7 == r.question_tokens
        assert r.output_tokens == 5
        by_group.setdefault(c.group, set()).add(c.system)
    assert sorted(by_group) == [0, 1, 2, 3]
    assert all(len(v) == 1 for v in by_group.values())  # one system prompt per group
    assert len({c.system for c in s.conversations}) == 4
    assert len({r.question for r in reqs}) == 12  # distinct questions
    # positions count occurrences of a group in send order
    seen: dict[int, int] = {}
    for r in reqs:
        assert r.position == seen.get(r.group, 0)
        seen[r.group] = r.position + 1
    # shuffled by default; shuffle: false keeps group order
    assert [r.group for r in reqs] != sorted(r.group for r in reqs)
    ordered = list(build_schedule(sp_spec(shuffle=False), None, 0).requests())
    assert [r.group for r in ordered] == sorted(r.group for r in ordered)


def test_same_seed_identical_different_seed_disjoint():
    a, b, c = (build_schedule(sp_spec(), None, s) for s in (0, 0, 1))
    assert texts(a) == texts(b)
    assert [r.group for r in a.requests()] == [r.group for r in b.requests()]
    ta, tc = texts(a), texts(c)
    assert not set(ta) & set(tc)
    first_a = {t.split()[0] for t in ta}
    first_c = {t.split()[0] for t in tc}
    assert not first_a & first_c  # no shared prefix at all, even of one token


def test_multi_turn_round_robin_order():
    s = build_schedule(mt_spec(), None, 3)
    reqs = list(s.requests())
    assert [(r.turn, r.session) for r in reqs] == [(t, k) for t in range(4) for k in range(3)]
    for c in s.conversations:
        assert [r.turn for r in c.turns] == [0, 1, 2, 3]
        assert all(r.position == r.turn for r in c.turns)
        assert len(WT.encode(c.system)) == 30


def test_lognormal_lengths_are_seeded_and_bounded():
    spec = mt_spec(
        question_tokens={"distribution": "lognormal", "mean": 40, "sigma": 0.6, "min": 5, "max": 90}
    )
    s1, s2 = build_schedule(spec, None, 0), build_schedule(spec, None, 0)
    lens = [r.question_tokens for r in s1.requests()]
    assert lens == [r.question_tokens for r in s2.requests()]
    assert all(5 <= n <= 90 for n in lens) and len(set(lens)) > 1
    assert all(len(WT.encode(r.question)) == r.question_tokens for r in s1.requests())


def test_sharegpt_turns(tmp_path: Path):
    data = [
        {
            "conversations": [
                {"from": "human", "value": f"question number {i} please"},
                {"from": "gpt", "value": "an answer"},
            ]
        }
        for i in range(20)
    ]
    (tmp_path / "sg.json").write_text(json.dumps(data))
    spec = parse_spec(
        {
            "name": "t",
            "model": "m",
            "workload": {
                "kind": "multi-turn",
                "sessions": 2,
                "turns": 3,
                "system_prompt_tokens": 10,
                "question_tokens": {"sharegpt": "sg.json"},
                "answer_tokens": 4,
            },
        },
        str(tmp_path / "s.yaml"),
        tmp_path,
    )
    s = build_schedule(spec, None, 0)
    for r in s.requests():
        assert r.question.startswith("question number") and r.question_tokens == 4
    (tmp_path / "sg.json").write_text("[]")
    with pytest.raises(SpecError, match="no human turns"):
        build_schedule(spec, None, 0)


def test_token_id_prompts_for_server_tokenizer():
    spec = mt_spec(api="sglang-generate", tokenizer="server")
    s = build_schedule(spec, None, 0)
    assert s.ids
    for c in s.conversations:
        assert isinstance(c.system, tuple) and len(c.system) == 30
    b = PromptBuilder(s, "sglang-generate")
    c = s.conversations[0]
    p = b.build(c, c.turns[1], [Turnout(answer="x y", answer_ids=(7, 8))])
    assert p.payload == list(c.system) + list(c.turns[0].question) + [7, 8] + list(c.turns[1].question)
    assert p.expected_tokens == len(p.payload)


def test_hf_tokenizer_path_missing_is_clear():
    with pytest.raises(HarnessError, match="no such file"):
        load_prompt_maker("/definitely/not/here")


def _tokenizer_json(path: Path) -> Path:
    """A word-level tokenizer.json over the word tokenizer's vocabulary, made with `tokenizers` alone."""
    tokenizers = pytest.importorskip("tokenizers")  # the `real` extra, installed by `make`
    from harness.tokenizer import VOCAB

    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(dict.fromkeys(VOCAB))}}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(["[UNK]"])
    path.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(path))
    return path


def _exact_lengths(maker) -> None:
    rng = random.Random(3)
    for n in (1, 17, 120):
        text, got = maker.make(rng, n, [5, 6])
        assert got == n and len(maker.hf.encode(text)) == n
    assert maker.count("alpha beta gamma") == 3


def test_tokenizer_json_without_transformers(tmp_path: Path, monkeypatch):
    """tokenizer.json (the file, or a folder holding it, under ~ or {cache}) loads with `tokenizers` alone."""
    from harness.workloads import tokenizers as tk

    real = tk._importable
    monkeypatch.setattr(tk, "_importable", lambda m: m != "transformers" and real(m))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    _tokenizer_json(tmp_path / "home" / "tok" / "tokenizer.json")
    _tokenizer_json(tmp_path / "cache" / "m" / "tokenizer.json")
    for path in ("~/tok/tokenizer.json", "~/tok", "{cache}/m/tokenizer.json", "{cache}/m"):
        maker = load_prompt_maker(path)
        assert isinstance(maker.hf, tk.TokenizerJson) and maker.kind == "hf", path
        _exact_lengths(maker)
    spec = mt_spec(tokenizer=str(tmp_path / "cache" / "m"))
    s = build_schedule(spec, None, 0)
    assert all(c.system_tokens == 30 for c in s.conversations)


def test_transformers_is_used_for_a_folder_when_it_imports(tmp_path: Path, monkeypatch):
    """With transformers importable a folder goes to AutoTokenizer; a tokenizer.json file to `tokenizers`."""
    import sys
    import types

    from harness.workloads import tokenizers as tk

    path = _tokenizer_json(tmp_path / "model" / "tokenizer.json")
    loaded: list[str] = []

    class Fast:  # what AutoTokenizer.from_pretrained gives, over the same tokenizer.json
        all_special_ids = [0]

        def __init__(self, folder: str) -> None:
            self.inner = tk.TokenizerJson(folder)

        def __len__(self) -> int:
            return len(self.inner)

        def encode(self, text: str, add_special_tokens: bool) -> list[int]:
            assert add_special_tokens is False
            return self.inner.encode(text)

        def decode(self, ids: list[int], skip_special_tokens: bool) -> str:
            return self.inner.decode(ids)

    def from_pretrained(folder: str, local_files_only: bool) -> Fast:
        assert local_files_only
        loaded.append(folder)
        return Fast(folder)

    fake = types.ModuleType("transformers")
    fake.AutoTokenizer = types.SimpleNamespace(from_pretrained=from_pretrained)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "transformers", fake)
    maker = load_prompt_maker(str(path.parent))
    assert isinstance(maker.hf, tk.HFTokenizer) and loaded == [str(path.parent)]
    _exact_lengths(maker)
    assert isinstance(load_prompt_maker(str(path)).hf, tk.TokenizerJson)


def test_no_tokenizer_library_is_one_clear_line(tmp_path: Path, monkeypatch):
    from harness.workloads import tokenizers as tk

    path = _tokenizer_json(tmp_path / "m" / "tokenizer.json")
    monkeypatch.setattr(tk, "_importable", lambda m: False)
    for p in (path, path.parent):
        with pytest.raises(HarnessError) as ei:
            load_prompt_maker(str(p))
        msg = str(ei.value)
        assert msg.startswith(f"tokenizer: {p}: ") and "\n" not in msg
        assert "pip install 'harness[real]'" in msg and "pip install 'harness[tokenizers]'" in msg
    (tmp_path / "empty").mkdir()
    with pytest.raises(HarnessError, match=r"empty: no tokenizer.json there; .*harness\[tokenizers\]"):
        load_prompt_maker(str(tmp_path / "empty"))


def test_prompt_builder_history_and_expected_tokens():
    s = build_schedule(mt_spec(api="openai-completions"), None, 0)
    b = PromptBuilder(s, "openai-completions")
    c = s.conversations[1]
    hist = [Turnout(answer="alpha beta gamma"), Turnout(answer="delta epsilon")]
    p = b.build(c, c.turns[2], hist)
    assert isinstance(p.payload, str)
    assert "alpha beta gamma" in p.payload and "delta epsilon" in p.payload
    assert c.turns[0].question in p.payload and c.turns[2].question in p.payload
    # word tokenizer: the rendered template's word count is what the sim will count
    assert p.expected_tokens == len(WT.encode(p.payload))
    chat = PromptBuilder(s, "openai-chat").build(c, c.turns[2], hist)
    assert [m["role"] for m in chat.payload] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert chat.expected_tokens == len(WT.encode(render_chat(chat.payload)))
    assert chat.sha == p.sha  # same prompt, same hash, whichever API carries it


def test_drop_reasoning_history():
    assert strip_reasoning("<think>long thoughts</think>\n\nthe answer") == "the answer"
    # Qwen3's template keeps what follows the LAST </think> (an answer that quotes the tag loses the
    # quote too) and strips leading newlines only, not spaces
    assert strip_reasoning("<think>a</think>\nsaid </think> once\n</think>\n\nfinal") == "final"
    assert strip_reasoning("thoughts only closed</think> answer") == " answer"
    assert strip_reasoning("plain") == "plain"
    assert strip_reasoning("<think>cut off before the end") == "<think>cut off before the end"
    s = build_schedule(mt_spec(history="drop-reasoning"), None, 0)
    c = s.conversations[0]
    p = PromptBuilder(s, "openai-chat").build(c, c.turns[1], [Turnout(answer="<think>hmm hmm</think>yes")])
    assert p.payload[2] == {"role": "assistant", "content": "yes"}
    v = build_schedule(mt_spec(), None, 0)
    p2 = PromptBuilder(v, "openai-chat").build(
        v.conversations[0], v.conversations[0].turns[1], [Turnout(answer="<think>hmm hmm</think>yes")]
    )
    assert p2.payload[2]["content"] == "<think>hmm hmm</think>yes"


@settings(max_examples=40, deadline=None)
@given(
    groups=st.integers(1, 6),
    ppg=st.integers(1, 5),
    sys_tokens=st.integers(0, 40),
    q_tokens=st.integers(1, 12),
    seed_a=st.integers(0, 10_000),
    seed_b=st.integers(0, 10_000),
)
def test_shared_prefix_invariants(groups, ppg, sys_tokens, q_tokens, seed_a, seed_b):
    spec = sp_spec(
        groups=groups, prompts_per_group=ppg, system_prompt_tokens=sys_tokens, question_tokens=q_tokens
    )
    a = build_schedule(spec, None, seed_a)
    assert len(a) == groups * ppg
    assert sorted(r.index for r in a.requests()) == list(range(groups * ppg))
    assert sorted((r.group, r.position) for r in a.requests()) == [
        (g, p) for g in range(groups) for p in range(ppg)
    ]
    for c in a.conversations:
        assert len(WT.encode(c.system)) == sys_tokens
        assert len(WT.encode(c.turns[0].question)) == q_tokens
    if seed_a != seed_b:
        b = build_schedule(spec, None, seed_b)
        heads_a = {(c.system or c.turns[0].question).split()[:2].__repr__() for c in a.conversations}
        heads_b = {(c.system or c.turns[0].question).split()[:2].__repr__() for c in b.conversations}
        if sys_tokens >= 2 or (sys_tokens == 0 and q_tokens >= 2):
            assert not heads_a & heads_b


@settings(max_examples=25, deadline=None)
@given(sessions=st.integers(1, 5), turns=st.integers(1, 5), seed=st.integers(0, 1000))
def test_multi_turn_invariants(sessions, turns, seed):
    s = build_schedule(mt_spec(sessions=sessions, turns=turns), None, seed)
    reqs = list(s.requests())
    assert len(reqs) == sessions * turns
    # every session's turn t comes before any session's turn t+1
    assert [r.turn for r in reqs] == sorted(r.turn for r in reqs)
    assert {c.system for c in s.conversations}.__len__() == sessions
