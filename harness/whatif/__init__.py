"""The what-if stage: a trace, spec or capture replayed offline through SGLang's cache semantics.

`inputs` (anything → one Trace shape), `grid` (the configurations asked for), `replay` (one
configuration, or all of them across processes), `output` (tables, chart, results entries).
"""
