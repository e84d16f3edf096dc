"""GPU telemetry: a background NVML sampler per point, per-point clock/throttle figures, clock locking.

`sampler.open_sampler` writes `telemetry.jsonl`; `stats.point_stats` turns its lines into the figures
`harness.verdicts` judges. Nothing here imports `pynvml` at module load: a machine without NVML
(the sim, CI) gets a null sampler that says why, never fake numbers.
"""
