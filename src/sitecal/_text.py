"""Words of the console and the run log that follow a count: "1 study", "2 studies", "0 studies".

English puts the singular after exactly one and the plural after any other count (zero included), so a
message says ``f"{n} {plural(n, 'study', 'studies')}"`` instead of a fixed "studies" or a hedged
"study(s)". The report's sentences are the report's own; this is for the command's messages.
"""

from __future__ import annotations

__all__ = ["plural"]


def plural(count: int, one: str, many: str | None = None) -> str:
    """The noun for ``count`` things: ``one`` when ``count`` is 1, else ``many`` (default ``one + "s"``).

    Parameters
    ----------
    count : int
        How many things the message counts.
    one : str
        The noun for one thing (``"study"``, ``"label row"``).
    many : str or None, default None
        The noun for any other count; None adds an "s" to ``one``.

    Returns
    -------
    str
        The noun alone, without the count, so that it can follow "1 of 3" as well as "3".

    Examples
    --------
    >>> f"{1} {plural(1, 'study', 'studies')}, {0} {plural(0, 'file')}"
    '1 study, 0 files'
    """
    if count == 1:
        return one
    return one + "s" if many is None else many
