"""Server log lines as typed records, so cache evidence does not depend on client timing.

Each engine's dialect (which lines it prints, how they become records) is its own, in harness.engines
(a `log.py` in each engine's folder; `engines.logs` picks the dialect and reads whole files); this package
holds what every dialect shares: the records and what is summed over them. Lines nothing matches are
counted, never fatal. Log timestamps carry no time zone: they are read as local time of the machine
parsing them (the server's, in a capture).

Modules: `records` (LogRecord, ParsedLog), `totals` (pool sizes, prefill sums, a point's window). The
names below are the package's public API.
"""

from harness.serverlog.records import KINDS, LogRecord, ParsedLog
from harness.serverlog.totals import in_window, pool_sizes, prefill_totals, token_count

__all__ = [
    "KINDS",
    "LogRecord",
    "ParsedLog",
    "in_window",
    "pool_sizes",
    "prefill_totals",
    "token_count",
]
