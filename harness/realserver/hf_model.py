"""A tiny random-weight Llama in HuggingFace format for every server that loads one (the real-server
suites, `transformers serve`): the same shape and tokenizer as the GGUF one.

The tokenizer is trained here (harness.realserver.model.make_tokenizer, the standard library's sources);
the weights are written by the server venv's own torch + transformers (hf_weights.py, run by `python`),
since the harness never imports torch. No download. Marked complete by `model.json` only after every
file is written.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from harness.paths import cache_root
from harness.realserver.model import (
    ENDOFTEXT,
    IM_END,
    SPECIAL_TOKENS,
    TOKENIZER_FILE,
    ModelShape,
    make_tokenizer,
)
from harness.realserver.prepare import PrepareError, locked

WEIGHTS_SCRIPT = Path(__file__).with_name("hf_weights.py")
HF_FILES = ("config.json", "model.safetensors", TOKENIZER_FILE, "tokenizer_config.json")
HF_SHAPE = ModelShape(context=16384)


@dataclass
class HfModel:
    folder: Path
    tokenizer: Path
    reused: bool
    seconds: dict[str, float]


def hf_model_dir(shape: ModelShape = HF_SHAPE) -> Path:
    return cache_root() / f"hf-llama-{shape.key}-c{shape.context}"


def _complete(folder: Path) -> bool:
    return (folder / "model.json").is_file() and all((folder / f).is_file() for f in HF_FILES)


def make_hf_model(
    python: Path,
    shape: ModelShape = HF_SHAPE,
    log=print,  # noqa: ANN001
    *,
    folder: Path | None = None,
    dtype: str = "float32",
    device: str = "cpu",
) -> HfModel:
    """The model folder (default: in the cache, by shape): reused when complete, else made with `python`
    (a venv's with torch + transformers) in ~10 s; `dtype`/`device` as hf_weights.py takes them."""
    folder = folder if folder is not None else hf_model_dir(shape)
    say = log or (lambda _m: None)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise PrepareError("hf-model", f"cannot create {folder}: {e}") from e
    with locked(folder):
        if _complete(folder):
            info = json.loads((folder / "model.json").read_text())
            say(f"[hf-model] reuse {folder}")
            return HfModel(folder, folder / TOKENIZER_FILE, True, info.get("seconds", {}))
        seconds: dict[str, float] = {}
        tok_path, seconds["tokenizer"] = make_tokenizer(shape.vocab, folder)
        vocab = json.loads(tok_path.read_text())
        ids = {t["content"]: t["id"] for t in vocab.get("added_tokens", [])}
        if not all(s in ids for s in SPECIAL_TOKENS):
            raise PrepareError("tokenizer", f"{tok_path} lacks the special tokens {SPECIAL_TOKENS}")
        t1 = time.monotonic()
        arg = json.dumps(
            {
                "shape": asdict(shape),
                "eos_id": ids[IM_END],
                "pad_id": ids[ENDOFTEXT],
                "dtype": dtype,
                "device": device,
            }
        )
        r = subprocess.run(
            [str(python), str(WEIGHTS_SCRIPT), str(folder), arg],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if r.returncode != 0 or "ok" not in r.stdout:
            tail = (r.stdout + r.stderr).strip().splitlines()[-3:]
            raise PrepareError("hf-model", f"writing weights with {python} failed: {' | '.join(tail)}")
        seconds["weights"] = round(time.monotonic() - t1, 2)
        params = next((ln.split()[1] for ln in r.stdout.splitlines() if ln.startswith("params ")), None)
        info = {"shape": asdict(shape), "seconds": seconds, "dtype": dtype, "params": params and int(params)}
        (folder / "model.json").write_text(json.dumps(info) + "\n")
        say(
            f"[hf-model] made {folder} (tokenizer {seconds['tokenizer']:.1f} s, weights {seconds['weights']:.1f} s)"
        )
        return HfModel(folder, tok_path, False, seconds)
