"""The sweep stage: `plan` (servers × points × seeds, resume decisions, checks before launch), `point`
(one point × seed against a live server), `bench` (the loop over servers and points, with restarts and
retries; `harness run` is its attach path; then summarize → report → validate), `suites` (named suites).
"""
