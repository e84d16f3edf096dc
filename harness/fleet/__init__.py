"""`harness fleet`: one `harness bench` per (node group, server profile) as a Ray task, captures streamed back.

`config` (the fleet file), `units` (what each task owes, the resume decision), `sync` (changes packed
as checksummed batches), `merge` (applied on the driver without losing anything), `remote` (the task
body), `driver` (tasks, retries), `stages` (per-node summaries and the fleet comparison). Only
`driver` imports Ray, and only when `harness fleet` runs.
"""
