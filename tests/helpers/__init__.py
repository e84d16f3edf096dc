"""What tests share and none of it a test: servers started as processes (procs), scripted servers run
as scripts (fakeserver, servers_stub, servers_first_launch), a capture built by hand (summary_capture),
and headless chromium over the DevTools protocol for the report page (browser)."""
