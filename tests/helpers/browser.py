"""Headless Debian chromium for the report-page tests, driven over the DevTools protocol on a pipe.

`--remote-debugging-pipe` needs no port, so the browser runs inside `unshare -n` (no network at all, not
even loopback) when we may make a namespace; every request the page makes is still recorded
(Network.requestWillBeSent), so a page that tried to load anything fails the test either way.
Installed once with apt-get (root); without it the caller skips, or fails under CI, with `why`.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--hide-scrollbars",
    "--remote-debugging-pipe",
]
LAPTOP = {"width": 1366, "height": 900, "deviceScaleFactor": 1, "mobile": False}


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def ensure_chromium() -> tuple[str | None, str]:
    """The chromium binary, installing Debian's package once when we are root; else (None, why)."""
    found = shutil.which("chromium")
    if found:
        return found, "already installed"
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return None, "chromium is not installed and apt-get cannot install it here (not root / no apt-get)"
    t0 = time.monotonic()
    _log("browser tests: installing Debian's chromium with apt-get (once; later runs reuse it)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "chromium"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1200)
    if r.returncode != 0:  # a fresh machine may have no package lists yet
        subprocess.run(["apt-get", "update", "-q"], capture_output=True, text=True, env=env, timeout=600)
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1200)
    found = shutil.which("chromium")
    if r.returncode != 0 or not found:
        last = (r.stderr.strip().splitlines() or r.stdout.strip().splitlines() or ["?"])[-1]
        return None, f"apt-get install chromium failed: {last}"
    _log(f"browser tests: chromium installed in {time.monotonic() - t0:.0f} s")
    return found, "installed"


def can_unshare_net() -> bool:
    """True when `unshare -n` works here (root, or user namespaces allowed)."""
    if not shutil.which("unshare"):
        return False
    r = subprocess.run(["unshare", "-n", "true"], capture_output=True, timeout=10)
    return r.returncode == 0


@dataclass
class PageResult:
    """What a loaded page showed: the extracted DOM facts, requests, errors, timings and images."""

    url: str
    dom: dict[str, Any]
    requests: list[str]
    errors: list[str]
    render_s: float
    screenshot: bytes
    pdf: bytes
    console: list[str] = field(default_factory=list)


EXTRACT = r"""
(() => {
  const text = (el) => el.textContent.replace(/\s+/g, ' ').trim();
  const tables = [...document.querySelectorAll('table.report-table')].map(t => ({
    table: t.dataset.table,
    experiment: t.closest('section') ? t.closest('section').dataset.experiment : null,
    node: t.closest('details.node-detail') ? t.closest('details.node-detail').dataset.node : null,
    header: [...t.querySelectorAll('thead th')].map(text),
    rows: [...t.querySelectorAll('tbody tr')].map(r => ({
      point: r.dataset.point, cells: [...r.children].map(text)})),
  }));
  const charts = [...document.querySelectorAll('figure.chart[data-kind]')].map(f => {  // drawn charts; not a static image
    const plot = f.querySelector('.plot');
    const canvas = f.querySelector('canvas');
    let painted = 0, w = 0, h = 0;
    if (canvas) {
      w = canvas.width; h = canvas.height;
      const d = canvas.getContext('2d').getImageData(0, 0, w, h).data;
      for (let i = 3; i < d.length; i += 4) if (d[i] > 0) painted++;
    }
    return {
      kind: f.dataset.kind,
      experiment: f.closest('section').dataset.experiment,
      expected: Number(f.dataset.expectedSeries),
      legend: [...f.querySelectorAll('.u-legend .u-series')].slice(1).map(text),
      error: plot.getAttribute('data-chart-error'),
      canvas: {w, h, painted},
    };
  });
  const badges = [...document.querySelectorAll('.badge')].map(b => ({
    verdict: b.dataset.verdict, title: b.getAttribute('title')}));
  const facts = Object.fromEntries([...document.querySelectorAll('dd[data-fact]')].map(d => [d.dataset.fact, text(d)]));
  return {
    title: document.title,
    drawn: document.documentElement.getAttribute('data-charts-drawn'),
    tables, charts, badges, facts,
    evidence: [...document.querySelectorAll('pre.evidence[data-point]')].map(p => ({point: p.dataset.point, experiment: p.closest('section') ? p.closest('section').dataset.experiment : null, text: p.textContent})),
    scrollWidth: document.documentElement.scrollWidth,
    bodyText: document.body.innerText.length,
    firstScreen: {  // what a reader sees on opening: the verdict line and At a glance, as rendered
      verdict: document.querySelector('.verdict-line') ? document.querySelector('.verdict-line').innerText : null,
      glance: document.querySelector('section.glance') ? document.querySelector('section.glance').innerText : null,
      glanceTop: document.querySelector('section.glance') ? document.querySelector('section.glance').getBoundingClientRect().top + window.scrollY : null,
    },
  };
})()
"""


LEGEND = r"""
(() => {
  const fig = document.querySelector(SEL).closest('figure.chart');
  return [...fig.querySelectorAll('.u-legend .u-series')].slice(1).map(r => ({
    label: r.querySelector('.u-label').textContent,
    value: r.querySelector('.u-value').textContent,
    off: r.classList.contains('u-off')}));
})()
"""

AFTER_CLICK = r"""
(() => {
  const fig = document.querySelector(SEL).closest('figure.chart');
  const c = fig.querySelector('canvas');
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let painted = 0;
  for (let i = 3; i < d.length; i += 4) if (d[i] > 0) painted++;
  const off = [...fig.querySelectorAll('.u-legend .u-series')].slice(1).map(r => r.classList.contains('u-off'));
  return {painted, off};
})()
"""


class Chromium:
    """One headless browser for several pages; stopped by its own pid."""

    def __init__(self, binary: str, no_network: bool = True) -> None:
        self.tmp = tempfile.TemporaryDirectory(prefix="harness-chromium-")
        cmd_in_r, self._cmd_w = os.pipe()  # we write commands, chromium reads fd 3
        self._out_r, out_w = os.pipe()  # chromium writes fd 4, we read
        argv = [binary, *FLAGS, f"--user-data-dir={self.tmp.name}", "about:blank"]
        if no_network:
            argv = ["unshare", "-n", *argv]
        shell = f'exec "$@" 3<&{cmd_in_r} 4>&{out_w}'
        self.proc = subprocess.Popen(
            ["bash", "-c", shell, "bash", *argv],
            pass_fds=(cmd_in_r, out_w),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        os.close(cmd_in_r)
        os.close(out_w)
        self._next = 0
        self._replies: dict[int, queue.Queue[dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self.events: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(self._out_r, 1 << 16)
            except OSError:
                return
            if not chunk:
                return
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                msg = json.loads(raw)
                if "id" in msg:
                    with self._lock:
                        q = self._replies.get(msg["id"])
                    if q is not None:
                        q.put(msg)
                else:
                    self.events.append(msg)

    def send(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        session: str | None = None,
        timeout: float = 60,
    ) -> dict[str, Any]:
        with self._lock:
            self._next += 1
            mid = self._next
            q: queue.Queue[dict[str, Any]] = queue.Queue()
            self._replies[mid] = q
        msg: dict[str, Any] = {"id": mid, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        try:
            reply = q.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"chromium did not answer {method} within {timeout} s") from None
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def _eval(self, session: str, expression: str) -> Any:
        r = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=session)
        if "exceptionDetails" in r:
            raise RuntimeError(f"evaluate failed: {r['exceptionDetails']}")
        return r["result"].get("value")

    def _point(self, session: str, selector: str, fx: float, fy: float) -> tuple[float, float]:
        """Viewport coordinates of a fraction (fx, fy) of the selected element's box."""
        js = f"(() => {{ const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect(); return [r.left + r.width * {fx}, r.top + r.height * {fy}]; }})()"
        x, y = self._eval(session, js)
        return float(x), float(y)

    def _events(self, session: str, method: str) -> list[dict[str, Any]]:
        return [e for e in list(self.events) if e.get("sessionId") == session and e.get("method") == method]

    def load(
        self,
        path: Path,
        timeout: float = 60,
        shot_at: str | None = None,
        hover: tuple[str, float, float] | None = None,
        click: str | None = None,
        viewport: dict[str, Any] | None = None,
        probe: str | None = None,
    ) -> PageResult:
        """Open a file, wait until its charts are drawn, read the DOM, take a laptop screenshot (scrolled to
        the element `shot_at` selects, else the top) and print it to PDF.

        `hover` = (selector, fx, fy) moves the mouse to that fraction of the element's box before the
        screenshot and records the legend values of its chart (dom["hover"]); `click` then clicks the
        selected element (a legend entry) and records the chart's painted pixels (dom["after_click"]).
        `viewport` replaces the laptop's metrics; `probe` is an expression whose value lands in
        dom["probe"]. A page without charts (advise.html) is read once its load event fires."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        s = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Network", "Page", "Runtime", "Log"):
            self.send(f"{domain}.enable", session=s)
        self.send("Emulation.setDeviceMetricsOverride", viewport or LAPTOP, session=s)
        url = path.resolve().as_uri()
        t0 = time.monotonic()
        self.send("Page.navigate", {"url": url}, session=s)
        drawn = None
        while time.monotonic() - t0 < timeout:
            if self._events(s, "Page.loadEventFired"):
                r = self.send(
                    "Runtime.evaluate",
                    {"expression": "document.documentElement.getAttribute('data-charts-drawn')"},
                    session=s,
                )
                drawn = r.get("result", {}).get("value")
                if drawn is not None or not self._eval(
                    s, "!!document.querySelector('figure.chart[data-kind]')"
                ):
                    break
            time.sleep(0.02)
        render_s = time.monotonic() - t0
        if drawn is None and self._eval(s, "!!document.querySelector('figure.chart[data-kind]')"):
            raise TimeoutError(f"{path}: charts not drawn within {timeout} s")
        r = self.send("Runtime.evaluate", {"expression": EXTRACT, "returnByValue": True}, session=s)
        if "exceptionDetails" in r:
            raise RuntimeError(f"DOM extraction failed: {r['exceptionDetails']}")
        dom = r["result"]["value"]
        if probe:
            dom["probe"] = self._eval(s, probe)
        if shot_at:
            js = f"document.querySelector({json.dumps(shot_at)}).scrollIntoView()"
            self.send("Runtime.evaluate", {"expression": js}, session=s)
        if hover:
            sel, fx, fy = hover
            x, y = self._point(s, sel, fx, fy)
            self.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y}, session=s)
            time.sleep(0.2)
            dom["hover"] = self._eval(s, LEGEND.replace("SEL", json.dumps(sel)))
        shot = base64.b64decode(self.send("Page.captureScreenshot", {"format": "png"}, session=s)["data"])
        pdf = base64.b64decode(self.send("Page.printToPDF", {"printBackground": True}, session=s)["data"])
        if click:
            self._eval(s, f"document.querySelector({json.dumps(click)}).scrollIntoView({{block: 'center'}})")
            x, y = self._point(s, click, 0.5, 0.5)
            for kind in ("mousePressed", "mouseReleased"):
                ev = {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1}
                self.send("Input.dispatchMouseEvent", ev, session=s)
            time.sleep(0.2)
            dom["after_click"] = self._eval(s, AFTER_CLICK.replace("SEL", json.dumps(click)))
        requests = [e["params"]["request"]["url"] for e in self._events(s, "Network.requestWillBeSent")]
        errors = [
            json.dumps(e["params"].get("exceptionDetails", {}).get("exception", {}).get("description", e))
            for e in self._events(s, "Runtime.exceptionThrown")
        ]
        errors += [
            e["params"]["entry"].get("text", "")
            for e in self._events(s, "Log.entryAdded")
            if e["params"]["entry"].get("level") == "error"
        ]
        console = [
            " ".join(str(a.get("value", "")) for a in e["params"].get("args", []))
            for e in self._events(s, "Runtime.consoleAPICalled")
        ]
        self.send("Target.closeTarget", {"targetId": target})
        return PageResult(url, dom, requests, errors, render_s, shot, pdf, console)

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError, TimeoutError, RuntimeError):
                self.send("Browser.close", timeout=5)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        for fd in (self._cmd_w, self._out_r):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.tmp.cleanup()
