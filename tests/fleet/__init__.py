"""Tests of harness/fleet/ (the layout of tests/ mirrors the package: tests/test_layout.py)."""
