"""The capture stage's files: where a run's results live, how they are written, and the records in them.

`files` (folder layout, append-only JSONL, atomic JSON), `records` (RequestRecord, PointRecord),
`points` (reading point.json: resume and attempt numbers), `manifest` (the one manifest writer,
fingerprints, the same-spec check), `redact` (keys and tokens kept out of every file written). The layout names are re-exported here because every stage uses them.
"""

from harness.capture.files import (
    MANIFEST,
    METRICS_AFTER,
    METRICS_BEFORE,
    POINT,
    REPLICAS,
    REQUESTS,
    ROUTER_METRICS_AFTER,
    ROUTER_METRICS_BEFORE,
    SERVER_INFO,
    SERVER_LOG,
    TELEMETRY,
    WORKERS_DIR,
    JsonlWriter,
    experiment_dir,
    point_dir,
    point_name,
    read_jsonl,
    server_dir,
    write_json_atomic,
)

__all__ = [
    "MANIFEST",
    "METRICS_AFTER",
    "METRICS_BEFORE",
    "POINT",
    "REPLICAS",
    "REQUESTS",
    "ROUTER_METRICS_AFTER",
    "ROUTER_METRICS_BEFORE",
    "SERVER_INFO",
    "SERVER_LOG",
    "TELEMETRY",
    "WORKERS_DIR",
    "JsonlWriter",
    "experiment_dir",
    "point_dir",
    "point_name",
    "read_jsonl",
    "server_dir",
    "write_json_atomic",
]
