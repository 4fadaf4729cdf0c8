"""``python -m sitecal.cli``: the ``sitecal`` command."""

from __future__ import annotations

from sitecal.cli import main

raise SystemExit(main())
