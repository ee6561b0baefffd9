"""Text that comes from users (group names, test ids, layer and model names, warnings and
reasons that quote them), made safe for each output. The one sanitiser every renderer and
error line uses; standard library only.

* :func:`terminal` (the ``term`` tables, the summary's lines, one-line errors): every
  control character is shown escaped as Python writes it (ESC as ``\\x1b``, CR and LF as
  ``\\r`` and ``\\n``, NUL as ``\\x00``, DEL and the C1 controls too), and so are the
  Unicode line and paragraph separators and the bidirectional controls (U+202E as
  ``\\u202e``): a name cannot clear the screen, colour the log, split a table row or
  reverse what follows it. Everything else (accents, CJK, emoji) is kept.
* :func:`markdown` (a CI job summary): HTML entity-escaped, Markdown punctuation
  backslash-escaped (a ``|`` cannot split a table cell), whitespace (line breaks, tabs)
  folded into one space so a value stays on its line, the other controls and the bidi
  overrides shown escaped as in the terminal, no NUL, and no live ``@mention``: a zero-width
  joiner (U+200D) after the ``@`` of ``@name`` keeps it text that notifies no one.
* HTML: jinja2's autoescape (``report/html.py``); JSON: kept exact (``json.dumps``
  escapes what JSON must).
"""

from __future__ import annotations

import re

__all__ = ["markdown", "terminal", "one_line", "plain"]

#: The bidirectional controls: the embeddings and overrides (U+202A..U+202E), the
#: isolates (U+2066..U+2069), the marks (U+200E, U+200F, U+061C).
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
#: C0, DEL and C1 controls, the line and paragraph separators and the bidi controls.
_UNSAFE = re.compile(f"[\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029{_BIDI}]")
#: A terminal's escape sequences (CSI ``ESC [ ... letter`` and two-character ``ESC x``),
#: removed from messages other programs wrote (TensorFlow's bold error text).
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")
#: ``@name`` or ``@org/team`` as GitHub reads a mention (after a non-word character).
_MENTION = re.compile(r"(?<![\w`])@(?=[A-Za-z0-9])")


_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal(text: object) -> str:
    """``text`` for a terminal, on one line: control characters, line separators and bidi
    controls shown escaped (``\\x1b``, ``\\n``, ``\\u202e``); the rest unchanged."""
    return _UNSAFE.sub(_escape, str(text))


def plain(text: object) -> str:
    """``text`` another program wrote with its terminal escape sequences (colours, bold)
    removed; its lines and controls as they are."""
    return _ANSI.sub("", str(text))


def one_line(text: object, limit: int = 300) -> str:
    """A message another program wrote (an exception from the backend), for a one-line
    error: its terminal escape sequences removed, its lines joined with ``" "``, every
    remaining control character escaped (:func:`terminal`), cut to ``limit`` characters."""
    s = " ".join(plain(text).split())
    s = terminal(s)
    return s if len(s) <= limit else s[: limit - 3] + "..."


def markdown(text: object) -> str:
    """``text`` safe as plain Markdown text (and GitHub's HTML-in-Markdown), on one line.

    HTML is entity-escaped and Markdown punctuation backslash-escaped, so the result must
    not go inside a code span (where backslashes are literal). Whitespace (line breaks,
    tabs) becomes one space, other controls and bidi controls are shown escaped, and an
    ``@mention`` gets a zero-width joiner after its ``@`` (it notifies no one).
    """
    s = " ".join(str(text).split())
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = _MD_SPECIAL.sub(r"\\\1", s)
    s = _UNSAFE.sub(_escape, s)  # after the backslashes: "\x1b" reads as written
    return _MENTION.sub("@\u200d", s)
