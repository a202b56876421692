"""Schemathesis hooks for test_schemathesis.py (loaded through SCHEMATHESIS_HOOKS).

An `Idempotency-Key` is single-use by contract: reused with another body or endpoint it is
refused (422 IDEMPOTENCY_KEY_REUSED), which the document says in words and no JSON schema can
state. The generator draws the same short keys again and again, so each valid key it draws is
replaced by a fresh one (a valid key too; an invalid one is left to be refused)."""

from __future__ import annotations

import re
import uuid
from typing import Any

import schemathesis

from jobnik.api.deps import IDEMPOTENCY_KEY_RE

KEY = re.compile(IDEMPOTENCY_KEY_RE)


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
    key = (case.headers or {}).get("Idempotency-Key")
    if isinstance(key, str) and KEY.match(key):
        case.headers["Idempotency-Key"] = uuid.uuid4().hex
