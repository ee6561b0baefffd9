"""Images for the HTML pages: PNG ``data:`` URLs of small uint8 images, standard library only."""

from __future__ import annotations

import base64
import struct
import zlib
from collections.abc import Sequence

__all__ = ["png_data_url"]


def png_data_url(width: int, height: int, channels: int, pixels: Sequence[int]) -> str | None:
    """A PNG ``data:`` URL of uint8 pixels (row-major, 1/3/4 channels); None if malformed."""
    color = {1: 0, 2: 4, 3: 2, 4: 6}.get(channels)
    if color is None or width <= 0 or height <= 0 or len(pixels) != width * height * channels:
        return None
    try:
        row = width * channels
        raw = b"".join(b"\x00" + bytes(pixels[r * row : (r + 1) * row]) for r in range(height))
    except (ValueError, TypeError):  # a value outside 0..255 or not an int
        return None

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    png = (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, color, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw, 9))
        + chunk(b"IEND", b"")
    )
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")
