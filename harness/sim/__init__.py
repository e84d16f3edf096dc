"""The embedded SGLang-compatible simulator: radix cache, host tier, scheduler, HTTP server.

Submodules are imported where used; importing this package costs nothing.
"""
