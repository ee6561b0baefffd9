"""Which training data each profile came from (``data-history.json`` in the cache folder),
so that a run can say "the training data changed since the last profile" instead of
silently building another one.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from pytest_sadl.atomic import atomic_write_text
from pytest_sadl.store.entry import MAX_META_BYTES, Invalid, load_json, open_regular

_HISTORY = "data-history.json"


def note_data(directory: str | os.PathLike[str], key: str, fingerprint: str, n: int) -> dict[str, Any] | None:
    """Remember that ``key`` (a model and a data source) was last profiled with data of
    ``fingerprint`` and ``n`` inputs; return what was remembered before (``None`` when
    nothing, or when the history cannot be read). Best effort: ``OSError`` is ignored."""
    file = Path(directory) / _HISTORY
    history = _read_history(file)
    before: dict[str, Any] | None = history.get(key)
    history.pop(key, None)
    history[key] = {"data": str(fingerprint), "n": int(n)}
    while len(history) > 200:  # bounded: the oldest entries go first
        history.pop(next(iter(history)))
    with contextlib.suppress(OSError):
        atomic_write_text(file, json.dumps(history, indent=1))
    return before if _is_note(before) else None


def _read_history(file: Path) -> dict[str, Any]:
    """The history's entries (objects only); empty when it cannot be read."""
    with contextlib.suppress(Invalid, OSError):
        with open_regular(file) as fh:
            loaded = load_json(fh, _HISTORY, MAX_META_BYTES // 4)
        if isinstance(loaded, dict):
            return {k: v for k, v in loaded.items() if isinstance(v, dict)}
    return {}


def _is_note(entry: dict[str, Any] | None) -> bool:
    """A remembered ``{"data": fingerprint, "n": inputs}``."""
    return entry is not None and isinstance(entry.get("data"), str) and type(entry.get("n")) is int
