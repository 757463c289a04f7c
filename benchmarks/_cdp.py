"""A minimal Chrome DevTools Protocol client over ``--remote-debugging-pipe`` (no websocket).

Chromium started with ``--remote-debugging-pipe`` reads commands from its fd 3 and writes
answers and events to its fd 4, each a JSON object ended by a NUL byte. This drives one page
target in real (not virtual) time: navigate, evaluate JavaScript, wait for a condition.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from typing import Any

__all__ = ["Browser"]

CHROMIUM = "/usr/bin/chromium"


class Browser:
    """A headless Chromium and one page in it, driven over the DevTools pipe."""

    def __init__(self, profile: str, width: int = 1400, height: int = 1000,
                 binary: str = CHROMIUM) -> None:
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def plumb() -> None:  # in the child: the pipe ends become fds 3 and 4 (inheritable)
            a, b = os.dup(to_chrome_r), os.dup(from_chrome_w)  # may be 3 or 4 already
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
             f"--user-data-dir={profile}", f"--window-size={width},{height}",
             "--no-first-run", "--disable-extensions", "about:blank"],
            preexec_fn=plumb, close_fds=False, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf = b""
        self._next = 0
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget",
                                 {"targetId": target, "flatten": True})["sessionId"]
        self.page("Page.enable")
        self.page("Runtime.enable")

    # -- protocol -------------------------------------------------------------------------------
    def call(self, method: str, params: dict[str, Any] | None = None,
             session: str | None = None, timeout: float = 60.0) -> Any:
        """Send one command and wait for its answer (events in between are dropped)."""
        self._next += 1
        ident = self._next
        msg: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            answer = self._read(deadline)
            if answer.get("id") == ident:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer.get("result", {})

    def page(self, method: str, params: dict[str, Any] | None = None,
             timeout: float = 60.0) -> Any:
        """A command to the page's session."""
        return self.call(method, params, self.session, timeout)

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_chrome], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self._from_chrome, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed its DevTools pipe")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        value: dict[str, Any] = json.loads(raw)
        return value

    # -- helpers --------------------------------------------------------------------------------
    def navigate(self, url: str) -> None:
        """Start loading ``url`` (returns once navigation began, not when it loaded)."""
        self.page("Page.navigate", {"url": url})

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (awaited if a promise)."""
        got = self.page("Runtime.evaluate", {"expression": expression,
                                             "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in got:
            raise RuntimeError(f"{expression}: {got['exceptionDetails']}")
        return got.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout: float = 60.0, every: float = 0.01) -> Any:
        """Poll ``expression`` until it is truthy; returns its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {timeout}s for {expression}")
            time.sleep(every)

    def screenshot(self, path: str) -> None:
        """A PNG of the page."""
        import base64

        data = self.page("Page.captureScreenshot", {"format": "png"})["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self) -> None:
        """Close Chromium."""
        try:
            self.call("Browser.close", timeout=5)
        except (OSError, RuntimeError, TimeoutError):
            pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._to_chrome, self._from_chrome):
            try:
                os.close(fd)
            except OSError:
                pass
