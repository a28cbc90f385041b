"""``python -m arrow_split``: the command line (see :mod:`arrow_split.cli`)."""

from __future__ import annotations

import sys

from arrow_split.cli import main

__all__: list[str] = []

if __name__ == "__main__":
    sys.exit(main())
