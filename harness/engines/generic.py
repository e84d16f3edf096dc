"""Engines run as a command: `transformers serve`, and any other (`generic`)."""

from __future__ import annotations

from harness.engines.registry import Adapter, command_argv, register

TRANSFORMERS = register(
    Adapter(
        name="transformers",  # `transformers serve`, as a `launch: command` profile with `engine: transformers`
        argv=command_argv,
        info_paths=("/v1/models",),
        flush_path=None,  # no cache reset endpoint: one point per launch (harness.realserver.tf_serve)
    )
)
GENERIC = register(Adapter(name="generic", argv=command_argv, info_paths=("/get_server_info", "/v1/models")))
