"""SQL identifiers: plain table and index names, and how a statement's table names are mapped.

Table names are formatted into SQL (they are ours, never a client's): `checked` refuses anything
but a plain lower-case identifier. A projection's statements name its live tables; a rebuild maps
them to shadow tables (`rebuild/shadow.py`), the live path leaves them as they are (`identity`).
"""

from __future__ import annotations

import re
from typing import Final

_NAME: Final = re.compile(r"^[a-z_][a-z0-9_]*$")


def checked(name: str) -> str:
    """`name` if it is a plain lower-case identifier (table names are formatted into SQL)."""
    if not _NAME.match(name):
        raise ValueError(f"not a plain identifier: {name!r}")
    return name


def identity(sql: str) -> str:
    return sql
