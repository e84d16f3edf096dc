"""The tiny model: a GGUF llama.cpp can load (checked by reading it back) and a tokenizer that round-trips."""

from __future__ import annotations

import pytest

from harness.realserver.model import CHAT_TEMPLATE, IM_END, IM_START, ModelShape, make_model, render_chatml
from harness.workloads.tokenizers import TokenizerJson

pytestmark = [pytest.mark.real_server, pytest.mark.slow]  # no build needed


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    import os

    old = os.environ.get("HARNESS_CACHE")
    os.environ["HARNESS_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    try:
        yield make_model(log=None)
    finally:
        if old is None:
            os.environ.pop("HARNESS_CACHE", None)
        else:
            os.environ["HARNESS_CACHE"] = old


def test_model_is_reused_the_second_time(tiny):
    again = make_model(log=None)
    assert again.reused and again.gguf == tiny.gguf and not tiny.reused


def test_gguf_holds_a_llama_with_the_trained_vocab(tiny):
    import gguf

    shape = ModelShape()
    r = gguf.GGUFReader(str(tiny.gguf))

    def field(name):
        f = r.fields[name]
        return f.contents()

    assert field("general.architecture") == "llama"
    assert field("llama.embedding_length") == shape.hidden
    assert field("llama.block_count") == shape.layers
    assert field("llama.attention.head_count") == shape.heads
    assert field("llama.feed_forward_length") == shape.ffn
    assert field("tokenizer.ggml.model") == "gpt2"
    assert field("tokenizer.chat_template") == CHAT_TEMPLATE
    tokens = field("tokenizer.ggml.tokens")
    assert len(tokens) == shape.vocab and tokens[1] == IM_START and tokens[2] == IM_END
    assert field("tokenizer.ggml.eos_token_id") == 2
    names = {t.name: t for t in r.tensors}
    assert len(names) == 2 + 1 + 9 * shape.layers
    assert list(names["blk.0.ffn_up.weight"].shape) == [shape.hidden, shape.ffn]
    assert 8e6 < tiny.gguf.stat().st_size < 16e6


def test_tokenizer_json_loads_without_transformers(tiny):
    tok = TokenizerJson(tiny.tokenizer)
    assert len(tok) == ModelShape().vocab
    text = render_chatml([{"role": "user", "content": "def f(x):\n    return x + 1"}])
    ids = tok.encode(text)
    assert ids[0] == 1 and ids.count(2) == 1  # <|im_start|> ... <|im_end|> are single special tokens
    assert tok.decode(ids) == text.replace(IM_START, "").replace(IM_END, "")
    import random

    rnd = tok.random_ids(random.Random(0), 50)
    assert len(rnd) == 50 and not {0, 1, 2} & set(rnd)
