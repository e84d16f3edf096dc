"""The summary stage: capture folders → summaries/<node>.json.

`read` (the capture, leniently), `figures` (per point x seed: requests, log lines, counters),
`summary` (median and spread over seeds, verdicts, writing).
"""
