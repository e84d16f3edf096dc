"""Write random, seeded Llama weights as a HuggingFace folder (config.json + model.safetensors).

Runs inside a server's venv with torch and transformers (a real-server suite's, a GPU image's; the
harness's own venv never imports them): `python hf_weights.py FOLDER '{"shape": {...}, "eos_id": 2, "pad_id": 0}'`, with
optional `"dtype": "bfloat16"` and `"device": "cuda"`: a 1-3 B model is initialised on the GPU in bf16
in seconds, where the CPU would take minutes. Imports nothing from the harness on purpose.
"""

from __future__ import annotations

import json
import sys


def write(
    folder: str, shape: dict, eos_id: int, pad_id: int, dtype: str = "float32", device: str = "cpu"
) -> None:
    import torch  # noqa: PLC0415
    from transformers import LlamaConfig, LlamaForCausalLM  # noqa: PLC0415

    torch.manual_seed(shape["seed"])
    config = LlamaConfig(
        vocab_size=shape["vocab"],
        hidden_size=shape["hidden"],
        intermediate_size=shape["ffn"],
        num_hidden_layers=shape["layers"],
        num_attention_heads=shape["heads"],
        num_key_value_heads=shape["heads"],
        max_position_embeddings=shape["context"],
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=pad_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        initializer_range=0.02,
    )
    torch_dtype = getattr(torch, dtype)
    torch.set_default_dtype(torch_dtype)
    with torch.device(device):
        model = LlamaForCausalLM(config).to(torch_dtype)
    model.save_pretrained(folder, safe_serialization=True)
    print(f"params {sum(p.numel() for p in model.parameters())}")


if __name__ == "__main__":
    args = json.loads(sys.argv[2])
    write(
        sys.argv[1],
        args["shape"],
        args["eos_id"],
        args["pad_id"],
        args.get("dtype", "float32"),
        args.get("device", "cpu"),
    )
    print("ok")
