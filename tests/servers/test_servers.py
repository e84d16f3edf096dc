"""Server profiles, matrix expansion, adapters, redaction and ServerProcess against a real tiny HTTP server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from harness.capture.redact import REDACTED, Redactor, collect_secrets, env_secrets, is_secret_name
from harness.engines import Launch, launch_argv
from harness.errors import SpecError
from harness.servers.process import ServerError, ServerProcess, install_signal_handlers, live_servers
from harness.spec.servers import parse_servers

FAKE = str(Path(__file__).parents[1] / "helpers" / "servers_stub.py")


def _pid_gone(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        # a zombie child of ours still answers kill(0): reap if it is ours
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        except ChildProcessError:
            pass
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(") ", 1)[1].startswith("Z"):
                    return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


# ------------------------------------------------------------------ profiles


def test_matrix_expands_only_profiles_that_mention_its_keys() -> None:
    raw = [
        {"name": "gpu-only", "launch": "sglang", "args": ["--max-total-tokens", 24094]},
        {
            "name": "{policy}-{pool}",
            "launch": "sim",
            "args": ["--radix-eviction-policy", "{policy}", "--max-total-tokens", "{pool}"],
            "env": {"CUDA_VISIBLE_DEVICES": "0"},
        },
    ]
    profs = parse_servers(raw, {"policy": ["lru", "lfu", "slru"], "pool": [8192, 16384]}, "s.yaml")
    names = [p.name for p in profs]
    assert names == ["gpu-only", "lru-8192", "lru-16384", "lfu-8192", "lfu-16384", "slru-8192", "slru-16384"]
    assert profs[0].args == ("--max-total-tokens", "24094")
    lfu = profs[3]
    assert lfu.args == ("--radix-eviction-policy", "lfu", "--max-total-tokens", "8192")
    assert lfu.matrix == {"policy": "lfu", "pool": 8192}
    assert lfu.template == "{policy}-{pool}"
    assert lfu.env == {"CUDA_VISIBLE_DEVICES": "0"}


def test_json_args_with_braces_are_not_placeholders() -> None:
    raw = [
        {
            "name": "s",
            "launch": "sim",
            "args": ["--radix-eviction-policy-config", '{"protected_threshold": 4}'],
        }
    ]
    assert parse_servers(raw, None, "s.yaml")[0].args[1] == '{"protected_threshold": 4}'


@pytest.mark.parametrize(
    ("servers", "matrix", "key", "words"),
    [
        (None, None, "servers", "missing"),
        ([{"name": "a", "launch": "docker"}], None, "servers[0].launch", "expected one of"),
        ([{"name": "a", "launch": "sim", "argz": []}], None, "servers[0].argz", "unknown key"),
        (
            [{"name": "a", "launch": "command", "command": "serve --port {port}"}],
            None,
            "servers[0].command",
            "never run by a shell",
        ),
        ([{"name": "a", "launch": "command", "command": ["serve"]}], None, "servers[0].command", "{port}"),
        (
            [{"name": "a", "launch": "sim", "args": ["--port", "1"]}],
            None,
            "servers[0].args[0]",
            "chosen at run time",
        ),
        (
            [{"name": "a", "launch": "sglang", "args": ["--model-path=/m"]}],
            None,
            "servers[0].args[0]",
            "--model",
        ),
        (
            [{"name": "a-{pol}", "launch": "sim"}],
            {"policy": ["lru"]},
            "servers[0].name",
            "unknown placeholder {pol}",
        ),
        (
            [{"name": "a", "launch": "sim", "args": ["{policy}"]}],
            {"policy": ["lru", "lfu"]},
            "servers[0].name",
            "add {policy}",
        ),
        ([{"name": "a", "launch": "sim"}], {"policy": ["lru"]}, "matrix.policy", "not used"),
        ([{"name": "a", "launch": "sim"}], {"policy": []}, "matrix.policy", "non-empty"),
        ([{"name": "a", "launch": "sim"}], {"port": [1]}, "matrix.port", "filled at launch"),
        ([{"name": "a", "launch": "sim"}], {"cache": [1]}, "matrix.cache", "build cache"),
        ([{"name": "a", "launch": "attach", "url": "localhost:3"}], None, "servers[0].url", "http"),
        ([{"name": "a", "launch": "attach", "url": "http://[::1"}], None, "servers[0].url", "IPv6"),
        ([{"name": "a", "launch": "attach", "url": "http://h:99999"}], None, "servers[0].url", "Port"),
        ([{"name": "a/b", "launch": "sim"}], None, "servers[0].name", "folder-safe"),
        ([{"name": "a", "launch": "sim", "env": {"X": [1]}}], None, "servers[0].env.X", "string or number"),
        (
            [{"name": "a", "launch": "sim", "ready_timeout_s": 0}],
            None,
            "servers[0].ready_timeout_s",
            "positive",
        ),
        (
            [{"name": "a", "launch": "sim", "args": ["--api-key", "{env:NO_SUCH_VAR_XYZ}"]}],
            None,
            "servers[0].args[1]",
            "NO_SUCH_VAR_XYZ is not set",
        ),
    ],
)
def test_bad_profiles_give_one_line_naming_the_key(servers, matrix, key, words) -> None:
    with pytest.raises(SpecError) as ei:
        parse_servers(servers, matrix, "spec.yaml")
    msg = str(ei.value)
    assert msg.startswith(f"spec.yaml: {key}: "), msg
    assert words in msg
    assert "\n" not in msg


def test_launch_lines_are_argument_lists() -> None:
    sg, sim, cmd = parse_servers(
        [
            {
                "name": "hicache",
                "launch": "sglang",
                "args": ["--enable-hierarchical-cache", "--hicache-ratio", 4],
            },
            {"name": "sim", "launch": "sim", "args": ["--max-total-tokens", 24094]},
            {
                "name": "llama",
                "launch": "command",
                "engine": "llama.cpp",
                "command": ["llama-server", "-m", "{model}", "--port", "{port}"],
            },
        ],
        None,
        "s.yaml",
    )
    ln = Launch(port=4321, host="127.0.0.1", model="/models/m")
    assert launch_argv(sg, ln) == [
        sys.executable, "-m", "sglang.launch_server", "--model-path", "/models/m",
        "--host", "127.0.0.1", "--port", "4321", "--enable-hierarchical-cache", "--hicache-ratio", "4",
    ]  # fmt: skip
    assert launch_argv(sim, ln)[:8] == [
        sys.executable,
        "-m",
        "harness",
        "serve-sim",
        "--host",
        "127.0.0.1",
        "--port",
        "4321",
    ]
    assert launch_argv(sim, ln)[-2:] == ["--max-total-tokens", "24094"]
    assert launch_argv(cmd, ln) == ["llama-server", "-m", "/models/m", "--port", "4321"]
    assert sg.with_launch("sim").launch == "sim"


def test_home_and_cache_paths_are_expanded(tmp_path: Path, monkeypatch) -> None:
    """No shell runs the command: `~` in command[0] and model, and {cache} anywhere, are filled by the harness."""
    home, cache = tmp_path / "home", tmp_path / "cache"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("HARNESS_CACHE", raising=False)
    items = [
        {"name": "tilde", "launch": "command", "model": "~/models/m.gguf"}
        | {"command": ["~/bin/server", "-m", "{model}", "--port", "{port}", "--log", "~/kept"]},
        {"name": "cached", "launch": "command", "model": "{cache}/m.gguf"}
        | {"command": ["{cache}/bin/server", "--port", "{port}", "--dir={cache}/x"], "env": {"D": "{cache}"}},
        {"name": "sg", "launch": "sglang", "model": "~/models/big", "args": ["--chat-template", "{cache}/t"]},
    ]
    tilde, cached, sg = parse_servers(items, None, "s.yaml")
    assert tilde.command[0] == str(home / "bin" / "server") and tilde.model == str(home / "models" / "m.gguf")
    assert tilde.command[-1] == "~/kept"  # other arguments are passed as written
    default = home / ".cache" / "harness"
    assert cached.command[0] == str(default / "bin" / "server") and cached.model == str(default / "m.gguf")
    assert cached.command[-1] == f"--dir={default}/x" and cached.env == {"D": str(default)}
    ln = Launch(port=1, host="127.0.0.1", model=sg.model)
    assert launch_argv(sg, ln)[3:5] == ["--model-path", str(home / "models" / "big")]
    assert launch_argv(sg, ln)[-1] == f"{default}/t"
    monkeypatch.setenv("HARNESS_CACHE", str(cache))
    (cached,) = parse_servers(items[1:2], None, "s.yaml")
    assert cached.command[0] == str(cache / "bin" / "server") and cached.model == str(cache / "m.gguf")


@pytest.mark.slow
def test_server_launched_from_a_home_relative_path(tmp_path: Path, monkeypatch) -> None:
    home = tmp_path / "home"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "python").symlink_to(sys.executable)
    monkeypatch.setenv("HOME", str(home))
    item = {"name": "fake", "launch": "command", "engine": "sglang", "ready_timeout_s": 20}
    (prof,) = parse_servers([item | {"command": ["~/bin/python", FAKE, "--port", "{port}"]}], None, "t.yaml")
    with ServerProcess(prof, tmp_path / "fake") as sp:
        assert httpx.get(sp.base_url + "/health", trust_env=False).status_code == 200
    assert sp.display_argv()[0] == str(home / "bin" / "python")


# ------------------------------------------------------------------ redaction


def test_secret_names_are_whole_words() -> None:
    assert all(
        is_secret_name(n) for n in ["HF_TOKEN", "--api-key", "Authorization", "OPENAI_API_KEY", "x-api-key"]
    )
    assert not any(
        is_secret_name(n) for n in ["max_tokens", "--max-total-tokens", "tokenizer", "output_tokens"]
    )


def test_redactor_hides_values_in_text_argv_and_objects() -> None:
    spec = {
        "headers": {"Authorization": "Bearer sk-abcdef123"},
        "servers": [{"args": ["--api-key", "sk-server-999"]}],
    }
    secrets = collect_secrets(spec) | env_secrets({"MY_API_KEY": "env-secret-42", "PATH": "/usr/bin"})
    assert secrets == {"Bearer sk-abcdef123", "sk-server-999", "env-secret-42"}
    r = Redactor(secrets)
    assert r.argv(["serve", "--api-key", "zzzzzzzz", "--max-total-tokens", "8192"]) == [
        "serve", "--api-key", REDACTED, "--max-total-tokens", "8192",
    ]  # fmt: skip
    assert r.argv(["--api-key=abcdefgh"]) == [f"--api-key={REDACTED}"]
    out = json.dumps(r.obj({**spec, "note": "key env-secret-42 here", "output_tokens": 64}))
    assert "sk-abcdef123" not in out and "sk-server-999" not in out and "env-secret-42" not in out
    assert '"output_tokens": 64' in out


# ------------------------------------------------------------------ ServerProcess


def _cmd_profile(*extra: str, engine: str | None = "sglang", timeout: float = 20.0, env: dict | None = None):
    item = {
        "name": "fake",
        "launch": "command",
        "command": [sys.executable, FAKE, "--port", "{port}", *extra],
        "ready_timeout_s": timeout,
    }
    if engine:
        item["engine"] = engine
    if env:
        item["env"] = env
    return parse_servers([item], None, "t.yaml")[0]


@pytest.mark.slow
def test_server_starts_saves_info_and_stops_its_whole_group(tmp_path: Path) -> None:
    prof = _cmd_profile("--child", "--api-key", "sk-live-0123456789")
    sp = ServerProcess(prof, tmp_path / "fake", redactor=Redactor({"sk-live-0123456789"}))
    with sp:
        assert sp.alive() and sp.port
        assert httpx.get(sp.base_url + "/health", trust_env=False).status_code == 200
        pid = sp.pid
        text = (tmp_path / "fake" / "server.log").read_text()
        child = int(text.split("child pid ")[1].split()[0])
        info = json.loads((tmp_path / "fake" / "server_info.json").read_text())
        assert info["port"] == sp.port and info["api_key"] == REDACTED
        assert sp in live_servers()
    assert _pid_gone(pid) and _pid_gone(child)
    assert sp not in live_servers()
    log = (tmp_path / "fake" / "server.log").read_text()
    assert "ready to roll" in log and "sk-live-0123456789" not in log and REDACTED in log


@pytest.mark.slow
def test_server_that_exits_fails_fast_with_the_log_tail(tmp_path: Path) -> None:
    sp = ServerProcess(_cmd_profile("--exit-at-start", "3", timeout=60), tmp_path / "s")
    t0 = time.monotonic()
    with pytest.raises(ServerError) as ei:
        sp.start()
    assert time.monotonic() - t0 < 15
    msg = str(ei.value)
    assert "exited with code 3" in msg and "cannot load the model" in msg and "\n" not in msg


@pytest.mark.slow
def test_server_never_ready_times_out_with_the_log_tail(tmp_path: Path) -> None:
    sp = ServerProcess(_cmd_profile("--never-ready", timeout=2), tmp_path / "s")
    t0 = time.monotonic()
    with pytest.raises(ServerError) as ei, sp:
        pass
    assert 2 <= time.monotonic() - t0 < 12
    assert "not ready after 2s" in str(ei.value) and "fake server args" in str(ei.value)
    assert _pid_gone(sp.pid)


@pytest.mark.slow
def test_readiness_by_url_only_for_generic_commands(tmp_path: Path) -> None:
    sp = ServerProcess(_cmd_profile("--ready-after", "0.5", engine=None), tmp_path / "s")
    with sp:
        assert httpx.get(sp.base_url + "/health", trust_env=False).status_code == 200
    assert _pid_gone(sp.pid)


def test_sglang_launched_by_the_harness_is_stopped_by_sigint_to_its_launcher_a_command_by_sigterm() -> None:
    """SGLang drains on SIGTERM behind a watchdog that looks every 5 s; SIGINT to its launcher stops it at
    once (docs/sglang-facts.md). A user's command, even one naming engine sglang, may be a wrapper script."""
    from harness.engines import adapter_for

    def profile(**item: object):
        return parse_servers([{"name": "s", **item}], None, "t.yaml")[0]

    sglang = adapter_for(profile(launch="sglang"))
    assert (sglang.stop_signal, sglang.stop_group) == (signal.SIGINT, False)
    for item in (
        {"launch": "command", "command": ["serve", "--port", "{port}"], "engine": "sglang"},
        {"launch": "sim"},
    ):
        ad = adapter_for(profile(**item))
        assert (ad.stop_signal, ad.stop_group) == (signal.SIGTERM, True), item


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "group"), [(signal.SIGINT, False), (signal.SIGTERM, True)])
def test_stop_sends_the_adapters_signal_and_leaves_no_process_of_the_group(
    tmp_path: Path, sig: signal.Signals, group: bool
) -> None:
    import dataclasses

    sp = ServerProcess(_cmd_profile("--child"), tmp_path / "s")
    sp.adapter = dataclasses.replace(sp.adapter, stop_signal=sig, stop_group=group)
    sp.start()
    child = int((tmp_path / "s" / "server.log").read_text().split("child pid ")[1].split()[0])
    sp.stop()
    assert _pid_gone(sp.pid) and _pid_gone(child)  # a child the launcher left behind is killed with the group
    assert f"stopped by {sig.name}" in (tmp_path / "s" / "server.log").read_text()


@pytest.mark.slow
def test_stop_kills_a_server_that_ignores_sigterm(tmp_path: Path) -> None:
    sp = ServerProcess(_cmd_profile("--ignore-term"), tmp_path / "s", stop_grace_s=0.5)
    sp.start()
    pid = sp.pid
    t0 = time.monotonic()
    sp.stop()
    assert _pid_gone(pid) and time.monotonic() - t0 < 10


@pytest.mark.slow
def test_restart_gives_a_new_process_and_keeps_the_log(tmp_path: Path) -> None:
    sp = ServerProcess(_cmd_profile(), tmp_path / "s")
    with sp:
        first = sp.pid
        os.kill(first, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while sp.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not sp.alive()
        sp.restart()
        assert sp.alive() and sp.pid != first and sp.launches == 2
        assert httpx.get(sp.base_url + "/health", trust_env=False).status_code == 200
        second = sp.pid
    assert _pid_gone(second)
    assert (tmp_path / "s" / "server.log").read_text().count("ready to roll") == 2


@pytest.mark.slow
def test_env_and_env_placeholders_reach_the_server_but_not_the_log(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_TOKEN_SRC", "tok-abcdef-98765")
    prof = _cmd_profile(env={"SECRET_TOKEN": "{env:FAKE_TOKEN_SRC}"})
    with ServerProcess(prof, tmp_path / "s") as sp:
        assert "SECRET_TOKEN" in prof.env
        pid = sp.pid
    log = (tmp_path / "s" / "server.log").read_text()
    assert "env SECRET_TOKEN=" + REDACTED in log and "tok-abcdef-98765" not in log
    assert _pid_gone(pid)


@pytest.mark.slow
def test_attach_uses_a_running_server(tmp_path: Path) -> None:
    with ServerProcess(_cmd_profile(), tmp_path / "own") as own:
        prof = parse_servers(
            [{"name": "there", "launch": "attach", "url": own.base_url + "/"}], None, "t.yaml"
        )[0]
        with ServerProcess(prof, tmp_path / "there") as sp:
            assert sp.base_url == own.base_url and sp.pid is None
            assert (tmp_path / "there" / "server_info.json").exists()
        assert own.alive()  # stopping an attached server leaves it alone


@pytest.mark.slow
def test_server_dies_with_a_harness_killed_by_sigkill(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from harness.servers.process import ServerProcess
        from harness.spec.servers import parse_servers
        prof = parse_servers([{{"name": "f", "launch": "command", "engine": "sglang",
            "command": [sys.executable, {FAKE!r}, "--port", "{{port}}"]}}], None, "t")[0]
        sp = ServerProcess(prof, Path({str(tmp_path)!r}) / "f").start()
        print(sp.pid, flush=True)
        time.sleep(600)
        """
    )
    harness = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        line = harness.stdout.readline()
        server_pid = int(line)
        harness.kill()
        harness.wait(10)
        assert _pid_gone(server_pid, within=10)
    finally:
        if harness.poll() is None:
            harness.kill()


def test_signal_handlers_restore_an_ignored_sigint_and_keep_nohups_sighup() -> None:
    """`cmd &` in a script starts the harness with SIGINT ignored: Ctrl-C must still stop it (exit 130);
    nohup's ignored SIGHUP is the user's wish and stays."""
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    saved = {s: signal.getsignal(s) for s in sigs}
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        install_signal_handlers()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGTERM)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        install_signal_handlers()  # not ignored: a hang-up stops the run like Ctrl-C
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGHUP)
    finally:
        for s, h in saved.items():
            signal.signal(s, h)


def test_free_port_never_gives_a_port_twice_even_when_the_os_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """The OS handed a gateway's just-released --prometheus-port out again as its --port; smg refused."""
    import harness.servers.process as process_mod

    ports = iter([41001, 41001, 41001, 41002])

    class Sock:
        def __init__(self, *_a: object) -> None:
            self.port = next(ports)

        def __enter__(self) -> Sock:
            return self

        def __exit__(self, *_a: object) -> None:
            pass

        def bind(self, _addr: object) -> None:
            pass

        def getsockname(self) -> tuple[str, int]:
            return ("127.0.0.1", self.port)

    monkeypatch.setattr(process_mod, "_HANDED_OUT", set())
    monkeypatch.setattr(process_mod.socket, "socket", Sock)
    assert [process_mod.free_port(), process_mod.free_port()] == [41001, 41002]
