"""Tests of harness/telemetry/ (the layout of tests/ mirrors the package: tests/test_layout.py)."""
