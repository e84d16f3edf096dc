"""What the sim says about itself, as SGLang 0.5.23 says it: startup log lines, /get_server_info,
/get_model_info, /v1/models and the state behind /metrics."""

from __future__ import annotations

import time
from typing import Any

from harness.sim.engine import Engine, EngineConfig
from harness.sim.logfmt import host_pool_line, kv_pool_line, scheduler_line
from harness.sim.metrics import Snapshot

VERSION = "0.5.23"


def startup_lines(args: Any, cfg: EngineConfig, engine: Engine, model_name: str) -> list[tuple[str, str]]:
    """(level, message) of the lines SGLang logs before it serves: its args, pools and scheduler sizes."""
    a, card = args, cfg.profile
    out = [
        (
            "info",
            f"server_args=ServerArgs(model_path='{a.model_path}', served_model_name='{model_name}', "
            f"host='{a.host}', port={a.port}, max_total_tokens={a.max_total_tokens}, page_size={a.page_size}, "
            f"radix_eviction_policy='{a.radix_eviction_policy}', enable_hierarchical_cache={a.enable_hierarchical_cache}, "
            f"hicache_ratio={a.hicache_ratio}, hicache_write_policy='{a.hicache_write_policy}', "
            f"disable_radix_cache={a.disable_radix_cache}, card_profile='{card.name}', time_scale={a.time_scale})",
        )
    ]
    for flag in getattr(a, "ignored_sglang_args", []):
        out.append(("warning", f"serve-sim: {flag} is an SGLang flag the sim does not model; ignored"))
    out.append(("info", f"Load weight begin. avail mem={card.gpu_mem_gb:.2f} GB"))
    out.append(("info", kv_pool_line(engine.pool, cfg.kv_bytes_per_token)))
    if cfg.hicache:
        out.append(("info", host_pool_line(cfg.host_pool_tokens, cfg.kv_bytes_per_token)))
    kv_gb = engine.pool * cfg.kv_bytes_per_token / (1 << 30)
    line = scheduler_line(
        max_total_num_tokens=engine.pool,
        chunked_prefill_size=int(cfg.chunked_prefill_size or -1),
        max_prefill_tokens=cfg.max_prefill_tokens,
        max_running_requests=int(cfg.max_running_requests or 0),
        context_len=int(cfg.context_length or 0),
        available_gpu_mem=max(card.gpu_mem_gb - 16.0 - kv_gb, 0.5),
    )
    out.append(("info", line))
    return out


def snapshot(eng: Engine, cfg: EngineConfig) -> Snapshot:
    """The engine's counters and gauges for /metrics."""
    st = eng.stats
    tree_stats = getattr(eng.tree, "stats", None)
    queue, running = eng.pending_counts()
    return Snapshot(
        prompt_tokens=st.prompt_tokens,
        generation_tokens=st.generation_tokens,
        cached_device=st.cached_device,
        cached_host=st.cached_host,
        cached_storage=st.cached_storage,
        storage_unfulfilled=dict(st.storage_unfulfilled) if eng.l3 is not None else None,
        prefetched_tokens=st.prefetched_tokens,
        storage_backuped_tokens=st.storage_backuped_tokens,
        storage_backend=cfg.storage_backend or "",
        num_requests=st.num_requests,
        evicted_tokens=int(getattr(tree_stats, "evicted_tokens", 0) or 0),
        load_back_tokens=int(getattr(tree_stats, "load_back_tokens", 0) or 0),
        num_running_reqs=running,
        num_queue_reqs=queue,
        token_usage=eng.token_usage(),
        cache_hit_rate=st.last_cache_hit_rate,
        gen_throughput=st.gen_throughput,
        kv_used_tokens=eng.used_tokens(),
        kv_evictable_tokens=eng.tree.evictable_size(),
        max_total_num_tokens=eng.pool,
        hicache_host_used_tokens=eng.host_used_tokens() if cfg.hicache else None,
        hicache_host_total_tokens=cfg.host_pool_tokens if cfg.hicache else None,
        num_retracted=st.num_retracted,
        backup_tokens=int(getattr(tree_stats, "host_written_tokens", 0) or 0),
        dropped_tokens=int(getattr(tree_stats, "dropped_tokens", 0) or 0),
    )


def server_info(
    args: Any, cfg: EngineConfig, engine: Engine, port: int | None, model_name: str
) -> dict[str, Any]:
    """/get_server_info: the args as given (the API key redacted), the sizes in effect, the card."""
    skip = {"policy_config", "ignored_sglang_args", "sim_profile"}
    info = {k: v for k, v in vars(args).items() if k not in skip}
    info["radix_eviction_policy_config"] = args.radix_eviction_policy_config
    info["api_key"] = "<redacted>" if args.api_key else None  # never echo a secret into captures
    info["port"] = port or args.port
    info["chunked_prefill_size"] = cfg.chunked_prefill_size
    info["max_running_requests"] = cfg.max_running_requests
    info["context_length"] = cfg.context_length
    info["sim_ingest_latency_ms"] = float(cfg.ingest_latency_s or 0.0) * 1000.0  # the one in effect
    info["sim_idle_poll_ms"] = float(cfg.idle_poll_s or 0.0) * 1000.0
    info["served_model_name"] = model_name
    info.update(
        max_total_num_tokens=engine.pool,
        max_req_input_len=engine.max_input_len(),
        hicache_host_pool_tokens=cfg.host_pool_tokens,
        ignored_sglang_args=list(getattr(args, "ignored_sglang_args", [])),
        card=cfg.profile.to_dict(),
        version=VERSION,
        engine="harness serve-sim",
        internal_states=[{"last_gen_throughput": engine.stats.gen_throughput}],
    )
    return info


def model_info(args: Any) -> dict[str, Any]:
    """/get_model_info."""
    return {
        "model_path": args.model_path,
        "tokenizer_path": args.model_path,
        "is_generation": True,
        "preferred_sampling_params": None,
        "weight_version": "default",
        "has_image_understanding": False,
        "has_audio_understanding": False,
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
    }


def model_list(model_name: str, context_length: int | None) -> dict[str, Any]:
    """/v1/models: the one served model."""
    return {
        "object": "list",
        "data": [
            {
                "id": model_name,
                "object": "model",
                "created": int(time.time()),
                "owned_by": "sglang",
                "root": model_name,
                "max_model_len": context_length,
            }
        ],
    }
