"""Every flag the shipped suites' `launch: sglang` profiles pass is accepted by SGLang 0.5.23's own parser and
argument resolution, with the CPU flags the harness adds; and what SGLang refuses, the harness reports in
one line naming the flag (tlru without its config, at startup, through the harness's ServerProcess).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.real_sglang.conftest import REPO, cpu_profile

pytestmark = [pytest.mark.sglang, pytest.mark.slow, pytest.mark.timeout(900)]
HERE = Path(__file__).resolve().parent


def _shipped_profiles() -> list[tuple[str, list[str]]]:
    import yaml

    from harness.spec import load_spec
    from harness.spec.servers import parse_servers

    out = []
    for path in sorted([*REPO.glob("workloads/*.yaml"), *REPO.glob("workloads/sglang-cpu/*.yaml")]):
        raw = yaml.safe_load(path.read_text())
        if not any(s.get("launch") == "sglang" for s in raw.get("servers") or []):
            continue  # llama.cpp / vLLM specs (their tokenizer files exist only once those are built)
        spec = load_spec(path)
        for prof in parse_servers(spec.servers_raw, spec.matrix_raw, str(path)):
            if prof.launch == "sglang":
                out.append((f"{path.relative_to(REPO)}:{prof.name}", list(prof.args)))
    return out


def _check(setup, argvs: list[list[str]]) -> list[dict]:
    from harness.servers.sglang_cpu.flags import cpu_env

    env = {**os.environ, **cpu_env({})}
    r = subprocess.run(
        [str(setup.python), str(HERE / "argcheck.py")],
        input=json.dumps(argvs),
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert "__RESULTS__" in r.stdout, r.stderr[-3000:]
    return json.loads(r.stdout.rsplit("__RESULTS__", 1)[1])


def test_every_shipped_profile_is_accepted_by_sglangs_own_parser(sglang_setup) -> None:
    profiles = _shipped_profiles()
    assert len(profiles) >= 10  # the default suite's and the sglang-cpu suite's
    argvs = []
    for name, args in profiles:
        resolved = cpu_profile(name.rpartition(":")[2], args, sglang_setup)
        argvs.append(["--model-path", str(sglang_setup.model), *resolved.args])
    # controls: what SGLang must refuse, so an "all accepted" cannot come from a checker that accepts anything
    argvs.append(["--model-path", str(sglang_setup.model), "--device", "cpu", "--no-such-flag"])
    argvs.append(
        ["--model-path", str(sglang_setup.model), "--device", "cpu", "--radix-eviction-policy", "tlru"]
    )
    results = _check(sglang_setup, argvs)
    refused = [
        (name, res["error"]) for (name, _), res in zip(profiles, results, strict=False) if not res["ok"]
    ]
    assert refused == [], refused
    assert results[-2] == {"ok": False, "error": "argparse exit 2"}
    assert not results[-1]["ok"] and "--radix-eviction-policy tlru" in results[-1]["error"]


def test_tlru_without_its_config_is_refused_at_startup_in_one_line_naming_the_flag(
    sglang_setup, tmp_path
) -> None:
    from harness.errors import SpecError
    from harness.servers.process import ServerError, ServerProcess

    bare = ["--radix-eviction-policy", "tlru", "--max-total-tokens", "900"]
    # a spec refuses it first, in one line, before any server is touched (harness/spec/tlru.py) ...
    with pytest.raises(SpecError, match="tlru needs threshold > next_prompt_estimate"):
        cpu_profile("tlru-bare", bare, sglang_setup)
    # ... and a profile that got past the spec check (a hand-built one) fails its start with SGLang's own line
    prof = cpu_profile("tlru-bare", bare[2:], sglang_setup)
    prof = dataclasses.replace(prof, args=(*prof.args, *bare[:2]))
    proc = ServerProcess(prof, tmp_path, model=str(sglang_setup.model), ready_timeout_s=300)
    with pytest.raises(ServerError) as err:
        proc.start()
    proc.stop()
    msg = str(err.value)
    assert "\n" not in msg
    head = msg.split("; log ", 1)[0]  # before the log tail: the cause, in the harness's words
    assert (
        "exited with code" in head and "ValueError: --radix-eviction-policy tlru needs 'threshold'" in head
    ), msg
