"""The first part of a WADO-RS answer, passed on as it arrives (never the whole body in memory).

A WADO-RS instance answer is ``multipart/related; type="application/dicom"; boundary=...`` with one part;
some servers send the instance bare (``application/dicom``), or multipart without a boundary, and
those are taken whole, as ``dicomweb-client`` takes them. Only the first part is read: the reader says
when it has ended, and the rest of the body is not read.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["FirstPart"]

#: Largest header block of the part (``--boundary``, its headers, the blank line), in bytes.
MAX_PART_HEADER_BYTES = 64 * 1024


class FirstPart:
    """Feed a body's chunks in order; the first part's content goes to ``sink`` as it is found.

    Raises ``ValueError`` (a malformed answer) on an unexpected media type, a header block that does not
    end, or a body that ends inside the part.
    """

    def __init__(self, content_type: str, sink: Callable[[bytes], None]) -> None:
        media, *params = [p.strip() for p in content_type.split(";")]
        media = media.lower()
        pairs = (p.partition("=") for p in params)
        boundary = next((v.strip().strip('"') for k, _, v in pairs if k.lower() == "boundary"), "")
        self._sink = sink
        self._held = bytearray()
        self.ended = False
        if media.startswith("application/dicom") or (media == "multipart/related" and not boundary):
            self._delimiter: bytes | None = None
            self._in_content = True
        elif media == "multipart/related":
            self._delimiter = b"\r\n--" + boundary.encode("ascii", "replace")
            self._in_content = False
        else:
            raise ValueError(f"unexpected media type {media[:40]!r}, not application/dicom")

    def feed(self, chunk: bytes) -> bool:
        """Take the next chunk of the body; True once the part has ended (read no more)."""
        if self.ended:
            return True
        self._held += chunk
        if not self._in_content:
            end = self._held.find(b"\r\n\r\n")
            if end < 0:
                if len(self._held) > MAX_PART_HEADER_BYTES:
                    raise ValueError("the part's headers do not end")
                return False
            del self._held[: end + 4]
            self._in_content = True
        if self._delimiter is None:
            self._sink(bytes(self._held))
            self._held.clear()
            return False
        found = self._held.find(self._delimiter)
        if found >= 0:
            self._sink(bytes(self._held[:found]))
            self._held.clear()
            self.ended = True
            return True
        keep = len(self._delimiter) - 1  # a delimiter may straddle two chunks
        if len(self._held) > keep:
            self._sink(bytes(self._held[:-keep]))
            del self._held[:-keep]
        return False

    def finish(self) -> None:
        """The body has ended: check that the part did."""
        if not self._in_content:
            raise ValueError("the answer ended before the part's content")
        if self._delimiter is not None and not self.ended:
            raise ValueError("the answer ended inside the instance (no closing boundary)")
        if self._held:
            self._sink(bytes(self._held))
            self._held.clear()
