"""A tiny random-weight Llama GGUF with a byte-level BPE tokenizer trained here: no weights are downloaded.

Output text is gibberish; token counts, prefix caching and timing are real. The tokenizer is also saved
as `tokenizer.json` (+ `tokenizer_config.json` with the chat template) so the harness counts tokens exactly.
"""

from __future__ import annotations

import json
import os
import sysconfig
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from harness.paths import cache_root
from harness.realserver.prepare import PrepareError, locked

IM_START, IM_END, ENDOFTEXT = "<|im_start|>", "<|im_end|>", "<|endoftext|>"
SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END)  # ids 0, 1, 2
# ChatML, as llama-server renders it (Jinja): the harness renders the same text to count tokens.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
MODEL_FILE, TOKENIZER_FILE = "tiny.gguf", "tokenizer.json"
_GENERATOR_REV = 1  # bump when the files this module writes change


@dataclass(frozen=True)
class ModelShape:
    hidden: int = 256
    layers: int = 4
    heads: int = 4
    ffn: int = 768
    vocab: int = 4096
    context: int = 32768
    seed: int = 0

    @property
    def key(self) -> str:
        return f"h{self.hidden}-l{self.layers}-a{self.heads}-f{self.ffn}-v{self.vocab}-s{self.seed}-r{_GENERATOR_REV}"


@dataclass
class TinyModel:
    """Paths of a made (or reused) model, and what making it cost."""

    folder: Path
    gguf: Path
    tokenizer: Path
    reused: bool
    seconds: dict[str, float]


def model_dir(shape: ModelShape = ModelShape()) -> Path:
    return cache_root() / f"llama-model-{shape.key}"


def render_chatml(messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
    """The text llama-server builds from chat messages with this model's template."""
    text = "".join(f"{IM_START}{m['role']}\n{m['content']}{IM_END}\n" for m in messages)
    return text + (f"{IM_START}assistant\n" if add_generation_prompt else "")


def training_files(limit_bytes: int = 3_000_000) -> list[str]:
    """Local text to train on: the Python standard library's own sources, in a stable order."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files, total = [], 0
    for p in sorted(stdlib.glob("*.py")):
        size = p.stat().st_size
        if total + size > limit_bytes:
            continue
        files.append(str(p))
        total += size
    if not files:
        raise PrepareError("tokenizer", f"no Python sources to train on under {stdlib}")
    return files


def train_tokenizer(vocab: int, out: Path) -> object:
    """Byte-level BPE with ChatML specials; the GPT-2 split regex, which llama.cpp's `gpt-2` pre-tokenizer matches."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: PLC0415

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train(training_files(), trainer)
    tok.save(str(out))
    return tok


def _write_tokenizer_config(folder: Path) -> None:
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": IM_END,
        "pad_token": ENDOFTEXT,
        "unk_token": None,
        "add_bos_token": False,
        "add_eos_token": False,
        "model_max_length": ModelShape().context,
        "chat_template": CHAT_TEMPLATE,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2) + "\n")


def _vocab_tables(tokenizer_json: Path) -> tuple[list[str], list[int], list[str]]:
    """Tokens in id order, their GGUF types (1 normal, 3 control) and the merges, from tokenizer.json."""
    data = json.loads(tokenizer_json.read_text())
    vocab: dict[str, int] = dict(data["model"]["vocab"])
    for added in data.get("added_tokens", []):
        vocab[added["content"]] = added["id"]
    tokens = [""] * len(vocab)
    for text, i in vocab.items():
        tokens[i] = text
    if any(t == "" for t in tokens):
        raise PrepareError("tokenizer", f"{tokenizer_json}: token ids are not contiguous")
    types = [3 if t in SPECIAL_TOKENS else 1 for t in tokens]
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    return tokens, types, merges


def write_gguf(path: Path, shape: ModelShape, tokenizer_json: Path) -> None:
    """Random f16 Llama weights (seeded) and the trained vocabulary, in llama.cpp's GGUF layout."""
    import gguf  # noqa: PLC0415
    import numpy as np  # noqa: PLC0415

    tokens, types, merges = _vocab_tables(tokenizer_json)
    n_vocab, h, f = len(tokens), shape.hidden, shape.ffn
    rng = np.random.default_rng(shape.seed)

    def mat(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float16)

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("harness-tiny-random")
    w.add_context_length(shape.context)
    w.add_embedding_length(h)
    w.add_block_count(shape.layers)
    w.add_feed_forward_length(f)
    w.add_head_count(shape.heads)
    w.add_head_count_kv(shape.heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(h // shape.heads)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(n_vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(tokens.index(ENDOFTEXT))
    w.add_eos_token_id(tokens.index(IM_END))
    w.add_pad_token_id(tokens.index(ENDOFTEXT))
    w.add_add_bos_token(False)
    w.add_add_eos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)

    w.add_tensor("token_embd.weight", mat(n_vocab, h))
    for i in range(shape.layers):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(h, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            w.add_tensor(f"blk.{i}.{name}.weight", mat(h, h))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(h, dtype=np.float32))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", mat(f, h))
        w.add_tensor(f"blk.{i}.ffn_up.weight", mat(f, h))
        w.add_tensor(f"blk.{i}.ffn_down.weight", mat(h, f))
    w.add_tensor("output_norm.weight", np.ones(h, dtype=np.float32))
    w.add_tensor("output.weight", mat(n_vocab, h))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def make_model(shape: ModelShape = ModelShape(), log=print) -> TinyModel:  # noqa: ANN001 - print-like
    """The tiny model folder: reused when complete, else made (a few seconds) and then marked complete."""
    folder = model_dir(shape)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise PrepareError("model", f"cannot create {folder}: {e}") from e
    with locked(folder):  # a second maker waits, then reuses
        return _make_model(shape, folder, log)


def make_tokenizer(vocab: int, folder: Path) -> tuple[Path, float]:
    """Train the tokenizer into `folder` (tokenizer.json and tokenizer_config.json), for the GGUF model
    and the HF one alike; returns its path and the seconds it took."""
    t0 = time.monotonic()
    tok_path = folder / TOKENIZER_FILE
    try:
        train_tokenizer(vocab, tok_path)
    except PrepareError:
        raise
    except Exception as e:  # noqa: BLE001 - tokenizers raises its own exception types
        raise PrepareError("tokenizer", f"training failed: {type(e).__name__}: {e}") from e
    _write_tokenizer_config(folder)
    return tok_path, round(time.monotonic() - t0, 2)


def _make_model(shape: ModelShape, folder: Path, log) -> TinyModel:  # noqa: ANN001 - print-like
    say = log or (lambda _m: None)
    done = folder / "model.json"
    gguf_path, tok_path = folder / MODEL_FILE, folder / TOKENIZER_FILE
    if done.is_file() and gguf_path.is_file() and tok_path.is_file():
        info = json.loads(done.read_text())
        say(f"[model] reuse: {gguf_path}")
        return TinyModel(folder, gguf_path, tok_path, True, info.get("seconds", {}))
    seconds: dict[str, float] = {}
    say("[model] tokenizer ...")
    tok_path, seconds["tokenizer"] = make_tokenizer(shape.vocab, folder)
    say(f"[model] tokenizer: {tok_path} ({seconds['tokenizer']:.1f} s)")
    t1 = time.monotonic()
    say("[model] gguf ...")
    tmp = gguf_path.with_suffix(f".tmp{os.getpid()}")
    try:
        write_gguf(tmp, shape, tok_path)
        tmp.replace(gguf_path)
    except PrepareError:
        raise
    except Exception as e:  # noqa: BLE001 - gguf/numpy errors
        tmp.unlink(missing_ok=True)
        raise PrepareError("model", f"writing {gguf_path} failed: {type(e).__name__}: {e}") from e
    seconds["gguf"] = round(time.monotonic() - t1, 2)
    size_mb = gguf_path.stat().st_size / 1e6
    say(f"[model] gguf: {gguf_path} ({size_mb:.1f} MB, {seconds['gguf']:.1f} s)")
    done.write_text(json.dumps({"shape": asdict(shape), "seconds": seconds}, indent=2) + "\n")
    return TinyModel(folder, gguf_path, tok_path, False, seconds)
