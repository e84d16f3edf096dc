"""The load generator: replay a Schedule against a live server under a concurrency cap and an arrival process.

run (run_schedule and its workers), due (requests by due time), sessions (multi-turn history, think
time, skipped turns), settings (the spec keys that say how requests are sent and judged), progress
(the live bar). Import from the modules: this package file stays empty so harness.spec can use
settings without an import cycle.
"""
