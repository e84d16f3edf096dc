"""`harness serve-sim` arguments: SGLang's own flag names and defaults, plus sim-only flags.

One server profile must launch either SGLang or the sim, so an SGLang flag the sim does not model is
accepted with a warning; a flag SGLang does not know is an error, as it would be for SGLang.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from harness.errors import HarnessError
from harness.sim.health_faults import MODES as HICACHE_FAULTS
from harness.sim.hicache import WRITE_POLICIES
from harness.sim.policies import POLICIES
from harness.sim.storage import BACKENDS as _BACKENDS
from harness.sim.storage import PREFETCH_POLICIES

NO_MODEL = "sim-model"  # the served name when no --model-path is given (SGLang itself needs one)
STORAGE_BACKENDS = tuple(_BACKENDS)
CHAT_TEMPLATES = ("verbatim", "drop-reasoning")
POLICY_CONFIG_KEYS: dict[str, tuple[str, ...]] = {
    "slru": ("protected_threshold",),
    "tlru": ("threshold", "next_prompt_estimate"),
}


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Real SGLang server flags (server_args.py, 0.4.10 .. 0.5.23) that the sim accepts and ignores.
# Flags the sim models are declared on the parser instead. Value-less (store_true) ones are marked.
SGLANG_VALUE_FLAGS = _names(
    """
tokenizer-path tokenizer-mode tokenizer-worker-num load-format model-loader-extra-config dtype
kv-cache-dtype quantization quantization-param-path context-length device chat-template
completion-template revision model-impl mem-fraction-static max-prefill-tokens schedule-policy
schedule-conservativeness cpu-offload-gb tensor-parallel-size tp-size pipeline-parallel-size pp-size
data-parallel-size dp-size expert-parallel-size ep-size stream-interval random-seed log-level-http
log-requests-level log-requests-target api-key admin-api-key file-storage-path watchdog-timeout
download-dir base-gpu-id gpu-id-step load-balance-method dist-init-addr nnodes node-rank
json-model-override-args lora-paths max-loras-per-batch max-lora-rank lora-target-modules
lora-backend attention-backend prefill-attention-backend decode-attention-backend sampling-backend
grammar-backend mm-attention-backend speculative-algorithm speculative-draft-model-path
speculative-num-steps speculative-eagle-topk speculative-num-draft-tokens torch-compile-max-bs
cuda-graph-max-bs cuda-graph-bs torchao-config triton-attention-num-kv-splits
num-continuous-decode-steps tool-call-parser reasoning-parser hicache-io-backend hicache-mem-layout
hicache-storage-backend-extra-config
kv-events-config bucket-time-to-first-token bucket-e2e-request-latency bucket-inter-token-latency
prompt-tokens-buckets generation-tokens-buckets crash-dump-folder otlp-traces-endpoint
disaggregation-mode disaggregation-transfer-backend
disaggregation-bootstrap-port moe-runner-backend moe-a2a-backend tool-server
preferred-sampling-params gc-warning-threshold-secs constrained-json-whitespace-pattern
fp8-gemm-backend tokenizer-metrics-custom-labels-header uvicorn-access-log-exclude-prefixes
sampling-defaults warmups mamba-ssm-dtype
max-micro-batch-size skip-tokenizer-init-mode nsa-prefill-backend nsa-decode-backend
ds-heavy-channel-type ds-channel-config-path hicache-storage-prefetch-timeout
speculative-draft-model-revision speculative-accept-threshold-single speculative-accept-threshold-acc
init-expert-location ep-num-redundant-experts eplb-rebalance-num-iterations enable-lora-overlap-loading
load-watch-interval sleep-on-idle-interval weight-loader-prefetch-num-threads
"""
)
SGLANG_SWITCH_FLAGS = _names(
    """
trust-remote-code skip-tokenizer-init is-embedding log-requests show-time-cost
disable-cuda-graph disable-cuda-graph-padding enable-nccl-nvls disable-outlines-disk-cache
disable-custom-all-reduce disable-overlap-schedule enable-mixed-chunk enable-dp-attention
enable-ep-moe enable-torch-compile enable-nan-detection enable-p2p-check
triton-attention-reduce-in-fp32 delete-ckpt-after-loading enable-memory-saver allow-auto-truncate
enable-custom-logit-processor enable-lmcache enable-torch-symm-mem disable-chunked-prefix-cache
disable-fast-image-processor collect-tokens-histogram enable-request-time-stats-logging
enable-trace sleep-on-idle skip-server-warmup enable-multimodal
enable-lora enable-eplb enable-deterministic-inference
weight-loader-disable-mmap enable-dynamic-batch-tokenizer keep-mm-feature-on-device
enable-return-hidden-states enable-flashinfer-allreduce-fusion enable-metrics-for-all-schedulers
enable-double-sparsity enable-mis enable-two-batch-overlap enable-single-batch-overlap
disable-shared-experts-fusion enable-cache-report-details enable-hierarchical-cache-storage
enable-layerwise-nvtx-marker enable-symm-mem disable-flashinfer-cutlass-moe-fp4-allgather
"""
)
SGLANG_FLAGS = SGLANG_VALUE_FLAGS | SGLANG_SWITCH_FLAGS

FAULT_HELP = """fault injection (off by default; for testing how a harness survives a failing server):
  --fault-crash-after N        exit the process abruptly (os._exit(1)) when request N+1 arrives
  --fault-http-500 FRAC        answer FRAC of generation requests with HTTP 500
  --fault-http-503 FRAC        answer FRAC of generation requests with HTTP 503
  --fault-stall FRAC           stall FRAC of streams for --fault-stall-seconds mid-answer
  --fault-malformed-sse FRAC   send one malformed SSE event in FRAC of streams
  --fault-drop FRAC            drop the connection mid-stream in FRAC of streams
  --fault-refuse-flush N       answer the first N /flush_cache calls with 400
  --fault-crash-on-flush       die at /flush_cache as SGLang 0.5.23 with a storage backend does on CPU
  --fault-ready-delay D        become ready D seconds after start (negative: never)
  --fault-health-stop-after S  stop answering /health S seconds after start (requests hang)
  --fault-seed N               seed of the fault dice (default 0)
  --fault-hicache MODE         a HiCache failure SGLang users report (harness.sim.health_faults):
                               host-never-matches | load-back-evicts-others | evict-whole-allocation |
                               prefetch-host-limit (needs an L3 backend) | prefetch-hang
  --fault-hang-after N         prefetch-hang: requests after the first N wait forever (default 0)"""


class SimArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser that lets known SGLang flags through with a warning."""

    def error(self, message: str) -> NoReturn:
        """One line naming the culprit, no usage dump (the CLI convention for bad input)."""
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")

    # one signature for typeshed's overloads (with and without a namespace): mypy sees a narrower override
    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        ns, extra = self.parse_known_args(args, namespace)
        ignored = _sort_unknown(extra, self)
        ns.ignored_sglang_args = ignored
        for flag in ignored:
            print(
                f"serve-sim: warning: SGLang flag {flag} is accepted but not modelled by the sim",
                file=sys.stderr,
            )
        try:
            validate(ns)
        except HarnessError as e:
            self.exit(2, f"{self.prog}: error: {e}\n")
        return ns


def _sort_unknown(extra: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """Known SGLang flags (with their values) -> list of names; anything else -> parser.error."""
    ignored: list[str] = []
    i = 0
    while i < len(extra):
        tok = extra[i]
        if not tok.startswith("--"):
            parser.error(f"unrecognized argument: {tok}")
        name = tok[2:].split("=", 1)[0]
        name_dash = name.replace("_", "-")
        if name_dash not in SGLANG_FLAGS:
            parser.error(f"unrecognized argument: --{name} (neither a sim flag nor an SGLang server flag)")
        ignored.append(f"--{name_dash}")
        i += 1
        if "=" not in tok and name_dash in SGLANG_VALUE_FLAGS:
            # consume values up to the next flag (nargs may be '+' for some SGLang flags)
            while i < len(extra) and not extra[i].startswith("--"):
                i += 1
    return ignored


def _frac(text: str) -> float:
    v = float(text)
    if not 0.0 <= v <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a fraction in [0, 1], got {text}")
    return v


def build_parser(prog: str = "harness serve-sim") -> SimArgumentParser:
    p = SimArgumentParser(
        prog=prog,
        description="An SGLang-compatible simulated server: SGLang's HTTP API, flags, log lines and "
        "metrics over a radix cache with SGLang's eviction semantics and a card timing model.",
        epilog=FAULT_HELP + "\n\nOther SGLang server flags are accepted with a warning and ignored.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    a = p.add_argument
    a("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    a("--port", type=int, default=30000, help="port (default 30000; 0 picks a free one)")
    a(
        "--model-path",
        "--model",
        default=None,
        help="the model whose shape the timing model uses: a local folder's config.json or a built-in"
        " (Qwen3-0.6B, Qwen3-8B, Qwen3-30B-A3B, Llama-3.1-8B-Instruct); weights are never loaded"
        f" (default: none, served as {NO_MODEL!r} with Llama-3.1-8B-Instruct's shape)",
    )
    a("--served-model-name", default=None, help="model name in the API (default: --model-path)")
    a("--max-total-tokens", type=int, default=None, help="device KV pool in tokens (default: the card's)")
    a("--page-size", type=int, default=None, help="tokens a KV page holds (default 1, as SGLang resolves it)")
    a("--radix-eviction-policy", default="lru", choices=POLICIES)
    a("--radix-eviction-policy-config", default=None, help='JSON, e.g. {"protected_threshold": 4}')
    a(
        "--enable-hierarchical-cache",
        "--enable-hicache",
        action="store_true",
        dest="enable_hierarchical_cache",
    )
    a(
        "--hicache-ratio",
        type=float,
        default=None,
        help="host pool = ratio x device pool (default 2.0, shrunk to fit 80%% of host memory)",
    )
    a("--hicache-size", type=float, default=0.0, help="host pool in GB per rank; overrides the ratio")
    a("--hicache-write-policy", default="write_through", choices=WRITE_POLICIES)
    a(
        "--hicache-storage-backend",
        default=None,
        choices=STORAGE_BACKENDS,
        help="L3 storage tier (harness.sim.storage); its pages live in $SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"
        " (default /tmp/hicache), shared by every server pointed there",
    )
    a("--hicache-storage-prefetch-policy", default="timeout", choices=PREFETCH_POLICIES)
    a("--disable-radix-cache", action="store_true")
    a("--max-running-requests", type=int, default=None)
    a("--chunked-prefill-size", type=int, default=None, help="default: the card's; -1 disables chunking")
    a("--max-prefill-tokens", type=int, default=16384)
    a("--context-length", type=int, default=None)
    a("--kv-cache-dtype", default="auto", choices=("auto", "bf16", "fp8_e4m3", "fp8_e5m2"))
    a("--mem-fraction-static", type=float, default=None, help="sizes the pool without --max-total-tokens")
    a("--enable-metrics", action="store_true")
    a("--enable-cache-report", action="store_true")
    a("--enable-priority-scheduling", action="store_true")  # the waiting queue by priority (engine.py)
    a("--schedule-low-priority-values-first", action="store_true")
    a("--disable-priority-preemption", action="store_true")  # running requests preempted (sim/priority.py)
    a("--priority-scheduling-preemption-threshold", type=int, default=10)
    a("--max-queued-requests", type=int, default=None)  # the queue limit's abort (sim/priority.py)
    a("--decode-log-interval", type=int, default=40)
    a("--log-level", default="info", choices=("debug", "info", "warning", "error", "critical"))
    a("--api-key", default=None, help="require 'Authorization: Bearer KEY' (as SGLang does)")
    a(
        "--random-seed",
        type=int,
        default=None,
        help="seed of the generated answers (default 0; SGLang draws one at random)",
    )
    a("--stream-interval", type=int, default=1)
    sim = p.add_argument_group("sim-only")
    sim.add_argument(
        "--card",
        default=None,
        help="the modelled GPU: l4, h100, h200, a100-80g, gb10 (timing from its datasheet and the model's"
        " config; default l4)",
    )
    sim.add_argument(
        "--card-profile",
        default=None,
        help="older name of --card; also takes l4-8b, h200-8b (aliases of l4, h200) and tiny-test",
    )
    sim.add_argument(
        "--sim-sm-clock-mhz",
        type=float,
        default=None,
        metavar="MHZ",
        help="SM clock prefill and decode compute run at (default: the card's typical sustained clock)",
    )
    sim.add_argument(
        "--sim-prefill-sm-clock-mhz",
        type=float,
        default=None,
        metavar="MHZ",
        help="the prefill forward's SM clock alone (default: --sim-sm-clock-mhz): a card's prefill-window clock",
    )
    sim.add_argument(
        "--sim-decode-sm-clock-mhz",
        type=float,
        default=None,
        metavar="MHZ",
        help="the decode step's SM clock alone (default: --sim-sm-clock-mhz): e.g. a busy-median below the "
        "prefill-window clock",
    )
    sim.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="wall seconds per modelled second: 0.02 runs 50x faster than the card (modelled times come"
        " from the sim's virtual clock either way)",
    )
    sim.add_argument(
        "--sim-lockstep-wait",
        type=float,
        default=1.0,
        metavar="S",
        help="wall seconds the virtual clock waits for a request the harness's load generator owes it"
        " (X-Harness-Lockstep header) before running on; 0 ignores the header",
    )
    sim.add_argument(
        "--sim-ingest-latency-ms",
        type=float,
        default=None,
        metavar="MS",
        help="modelled milliseconds the tokenizer manager spends on each request before the scheduler can"
        " receive it, one request after another (default 1.0; see docs/sglang-scheduling.md): an idle"
        " scheduler starts a burst's first request alone and the rest join the next batch; 0 hands a burst"
        " over at once",
    )
    sim.add_argument(
        "--sim-idle-poll-ms",
        type=float,
        default=0.0,
        metavar="MS",
        help="modelled milliseconds one spin of an idle scheduler's loop takes (default 0: it sees a request"
        " the moment it arrives, as on a quiet GPU host); on a slow or loaded host several requests of a"
        " burst land before the spin that finds the first, and start together",
    )
    sim.add_argument(
        "--sim-radix-tree",
        choices=("unified", "radix"),
        default="unified",
        help="which SGLang tree to reproduce: unified (UnifiedRadixCache, what 0.5.23 builds for every policy)"
        " or radix (the plain RadixCache of older servers; no tlru)",
    )
    sim.add_argument("--log-file", default=None, help="also append the log lines to this file")
    sim.add_argument(
        "--answer-len", type=int, default=None, help="answer length when not ignore_eos (default: seeded)"
    )
    sim.add_argument(
        "--sim-reasoning-tokens",
        type=int,
        default=0,
        metavar="N",
        help="start every answer with <think> + N words + </think>, a reasoning model's output; the span"
        " counts toward completion_tokens and max_tokens bounds the whole answer (default 0: none)",
    )
    sim.add_argument(
        "--sim-chat-template",
        choices=CHAT_TEMPLATES,
        default="verbatim",
        help="verbatim renders chat histories as sent; drop-reasoning strips the <think>...</think> span"
        " from assistant messages before the last user message, as Qwen3-style templates do",
    )
    f = p.add_argument_group("faults (see below)")
    f.add_argument("--fault-crash-after", type=int, default=None, metavar="N")
    f.add_argument("--fault-http-500", type=_frac, default=0.0, metavar="FRAC")
    f.add_argument("--fault-http-503", type=_frac, default=0.0, metavar="FRAC")
    f.add_argument("--fault-stall", type=_frac, default=0.0, metavar="FRAC")
    f.add_argument("--fault-stall-seconds", type=float, default=5.0, metavar="S")
    f.add_argument("--fault-malformed-sse", type=_frac, default=0.0, metavar="FRAC")
    f.add_argument("--fault-drop", type=_frac, default=0.0, metavar="FRAC")
    f.add_argument("--fault-refuse-flush", type=int, default=0, metavar="N")
    f.add_argument("--fault-crash-on-flush", action="store_true")
    f.add_argument("--fault-ready-delay", type=float, default=0.0, metavar="D")
    f.add_argument("--fault-health-stop-after", type=float, default=None, metavar="S")
    f.add_argument("--fault-seed", type=int, default=0, metavar="N")
    f.add_argument("--fault-hicache", choices=HICACHE_FAULTS, default=None, metavar="MODE")
    f.add_argument("--fault-hang-after", type=int, default=0, metavar="N")
    return p


def parse_policy_config(policy: str, text: str | None) -> dict[str, Any]:
    """--radix-eviction-policy-config as a dict, checked the way SGLang checks it at startup."""
    if not text:
        return {}
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as e:
        raise HarnessError(f"--radix-eviction-policy-config: invalid JSON {text!r}: {e.msg}") from None
    if not isinstance(cfg, dict):
        raise HarnessError(f"--radix-eviction-policy-config: expected a JSON object, got {text!r}")
    allowed = POLICY_CONFIG_KEYS.get(policy, ())
    for key, value in cfg.items():
        if key not in allowed:
            raise HarnessError(
                f"--radix-eviction-policy-config: unknown key {key!r} for eviction policy {policy!r}"
                f" (allowed: {', '.join(allowed) or 'none'})"
            )
        if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
            raise HarnessError(
                f"--radix-eviction-policy-config: {key} must be a non-negative number, got {value!r}"
            )
    if policy == "slru" and "protected_threshold" in cfg and cfg["protected_threshold"] < 1:
        raise HarnessError("--radix-eviction-policy-config: protected_threshold must be >= 1")
    if policy == "tlru":
        missing = [k for k in ("threshold", "next_prompt_estimate") if k not in cfg]
        if missing:
            raise HarnessError(f"--radix-eviction-policy-config: tlru needs {', '.join(missing)}")
        if cfg["threshold"] <= cfg["next_prompt_estimate"]:
            raise HarnessError(
                "--radix-eviction-policy-config: tlru threshold "
                f"({cfg['threshold']}) must be greater than next_prompt_estimate ({cfg['next_prompt_estimate']})"
            )
    return cfg


def validate(ns: argparse.Namespace) -> None:
    """Startup checks SGLang would fail on; fills derived fields (policy_config) and resolves the defaults
    SGLang leaves None in its parser: --page-size 1 (as its resolution does), --random-seed 0 (SGLang draws
    one at random; the sim's answers repeat), no --model-path (SGLang refuses to start; the sim serves
    NO_MODEL)."""
    if ns.page_size is None:
        ns.page_size = 1
    if ns.random_seed is None:
        ns.random_seed = 0
    if ns.model_path is None:
        ns.model_path = NO_MODEL
    ns.policy_config = parse_policy_config(ns.radix_eviction_policy, ns.radix_eviction_policy_config)
    if ns.radix_eviction_policy == "tlru" and getattr(ns, "sim_radix_tree", "unified") == "radix":
        raise HarnessError(
            "--sim-radix-tree radix: --radix-eviction-policy tlru needs the unified tree "
            "(SGLang's plain RadixCache has no T-LRU bookkeeping)"
        )
    from harness.sim.timing import DEFAULT_PROFILE, resolve_profile

    def warn(line: str) -> None:
        print(f"serve-sim: warning: {line}", file=sys.stderr)

    ns.card_profile = ns.card or ns.card_profile or DEFAULT_PROFILE
    ns.sim_profile = resolve_profile(
        ns.card_profile,
        ns.model_path,
        getattr(ns, "sim_sm_clock_mhz", None),
        warn=warn,
        prefill_sm_clock_mhz=getattr(ns, "sim_prefill_sm_clock_mhz", None),
        decode_sm_clock_mhz=getattr(ns, "sim_decode_sm_clock_mhz", None),
    )
    for name in ("max_total_tokens", "max_running_requests"):
        v = getattr(ns, name)
        if v is not None and v <= 0:
            raise HarnessError(f"--{name.replace('_', '-')}: must be positive, got {v}")
    if ns.page_size <= 0:
        raise HarnessError(f"--page-size: must be positive, got {ns.page_size}")
    if ns.time_scale <= 0:
        raise HarnessError(f"--time-scale: must be positive, got {ns.time_scale}")
    if getattr(ns, "sim_lockstep_wait", 0) < 0:
        raise HarnessError(f"--sim-lockstep-wait: must be >= 0, got {ns.sim_lockstep_wait}")
    ingest = getattr(ns, "sim_ingest_latency_ms", None)
    if ingest is not None and not 0 <= ingest < 60_000:
        raise HarnessError(f"--sim-ingest-latency-ms: must be in [0, 60000), got {ingest:g}")
    poll = getattr(ns, "sim_idle_poll_ms", 0.0)
    if not 0 <= poll < 60_000:
        raise HarnessError(f"--sim-idle-poll-ms: must be in [0, 60000), got {poll:g}")
    if ns.fault_hicache == "prefetch-host-limit" and not ns.hicache_storage_backend:
        raise HarnessError(
            "--fault-hicache prefetch-host-limit: needs --hicache-storage-backend (an L3 tier)"
        )
    if ns.hicache_storage_backend and not ns.enable_hierarchical_cache:
        raise HarnessError("--hicache-storage-backend: needs --enable-hierarchical-cache")
    if ns.hicache_ratio is not None and ns.hicache_ratio <= 0:
        raise HarnessError(f"--hicache-ratio: must be positive, got {ns.hicache_ratio}")
    if getattr(ns, "sim_reasoning_tokens", 0) < 0:
        raise HarnessError(f"--sim-reasoning-tokens: must be >= 0, got {ns.sim_reasoning_tokens}")
    if ns.decode_log_interval <= 0:
        raise HarnessError(f"--decode-log-interval: must be positive, got {ns.decode_log_interval}")
    if not 0 <= ns.port <= 65535:
        raise HarnessError(f"--port: not a port number: {ns.port}")
