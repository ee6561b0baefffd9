"""The plugin's own lines while pytest runs: after pytest's header, never garbling a log.

The training profile is built when the session starts, before pytest writes its header
("test session starts", the platform, the plugins). Its status lines ("sadl: tracing
1437 training inputs ...") are held until the header is out and then written in order
with it, as the other ``pytest_report_header`` lines are; with ``-q`` (no header) they
are written just before the first test. On a terminal a progress bar of the tracing
pass is drawn on one line in place and erased when done; in a log (not a TTY) there is
no bar, only the status lines.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # stdlib only at run time: `sadl`'s progress bar uses bar_line
    import pytest

__all__ = ["Phases", "Status", "bar_line", "short_path"]


def short_path(text: str, rootdir: Path) -> str:
    """``text`` with the rootdir's absolute prefix dropped from every path in it."""
    prefix = str(rootdir).rstrip("/\\") + "/"
    return text.replace(prefix, "")


def bar_line(done: int, total: int | None, elapsed: float, width: int = 30) -> str:
    """One progress line: ``[#####.....] 300/600 inputs  50%   4.1s eta 4s``."""
    if not total:
        return f"{done} inputs {elapsed:5.1f}s"
    frac = min(1.0, done / total)
    fill = int(round(frac * width))
    eta = f" eta {elapsed / frac - elapsed:4.0f}s" if 0 < frac < 1 else ""
    return f"[{'#' * fill}{'.' * (width - fill)}] {done}/{total} inputs {frac:4.0%} {elapsed:5.1f}s{eta}"


class Status:
    """The status lines and progress bar of one pytest process (not of an xdist worker)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self._held: list[tuple[str, bool]] | None = []  # None: the header is out, write at once
        self._last = 0.0
        self._start = 0.0
        self._drawn = False

    def _terminal(self) -> Any:
        return self.config.pluginmanager.get_plugin("terminalreporter")

    def say(self, line: str, warning: bool) -> None:
        """A status line (yellow when ``warning``), held until pytest's header is written."""
        text = f"sadl: {line if warning else short_path(line, self.config.rootpath)}"
        if self._held is not None:
            self._held.append((text, warning))
            return
        tr = self._terminal()
        if tr is not None:
            self._erase()
            tr.write_line(text, yellow=warning)

    def header(self) -> list[str]:
        """The held lines, for ``pytest_report_header``; later lines are written at once."""
        held, self._held = self._held or [], None
        return [text for text, _ in held]

    def release(self) -> None:
        """Write the held lines now (no header was written: ``-q``, or the run ends early)."""
        held, self._held = self._held or [], None
        for text, warning in held:
            tr = self._terminal()
            if tr is not None:
                tr.write_line(text, yellow=warning)

    def progress(self) -> Callable[[int, int | None], None] | None:
        """A progress callback drawing a bar on a terminal, or ``None`` in a log."""
        tr = self._terminal()
        if tr is None or not getattr(tr, "isatty", False):
            return None
        self._start = time.monotonic()
        self._last = 0.0

        def draw(done: int, total: int | None) -> None:
            now = time.monotonic()
            final = total is not None and done >= total
            if not final and now - self._last < 0.1:  # at most ten redraws a second
                return
            self._last = now
            tr.rewrite("sadl: " + bar_line(done, total, now - self._start), erase=True)
            self._drawn = True
            if final:
                self._erase()

        return draw

    def _erase(self) -> None:
        if self._drawn:
            tr = self._terminal()
            if tr is not None:
                tr.rewrite("", erase=True)
            self._drawn = False


class Phases:
    """What the end of a session is doing, said once it has taken more than ``after``
    seconds: silent for a quick end, then the step in progress and each next one.

    Used as ``with Phases(say) as phase: compute(..., phase=phase)``; a timer thread wakes
    after ``after`` seconds (the main thread is computing then, not writing)."""

    def __init__(self, say: Callable[[str], None], after: float = 2.0) -> None:
        self.say = say
        self.after = after
        self.current: str | None = None
        self.loud = False
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def __call__(self, what: str) -> None:
        with self._lock:
            self.current = what
            if self.loud:
                self.say(what)

    def _wake(self) -> None:
        with self._lock:
            self.loud = True
            if self.current is not None:
                self.say(self.current)

    def __enter__(self) -> Phases:
        self._timer = threading.Timer(self.after, self._wake)
        self._timer.daemon = True
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._timer is not None:
            self._timer.cancel()
