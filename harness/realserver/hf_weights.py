"""Write random, seeded Llama weights as a HuggingFace folder (config.json + model.safetensors).

Runs inside the vLLM venv (it needs torch and transformers, which the harness's own venv never imports):
`python hf_weights.py FOLDER '{"hidden": 256, ...}'`. Imports nothing from the harness on purpose.
"""

from __future__ import annotations

import json
import sys


def write(folder: str, shape: dict, eos_id: int, pad_id: int) -> None:
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
    model = LlamaForCausalLM(config).to(torch.float32)
    model.save_pretrained(folder, safe_serialization=True)


if __name__ == "__main__":
    args = json.loads(sys.argv[2])
    write(sys.argv[1], args["shape"], args["eos_id"], args["pad_id"])
    print("ok")
