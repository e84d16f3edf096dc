"""The test suite, laid out as the package: tests/<package>/ tests harness/<package>/ (tests/test_layout.py
keeps it so); `tests.helpers` holds what tests share (processes, the CLI in a child, spec files, captures),
none of it a test."""
