"""The fake Compute Engine's list answers: the part of GCE's `filter` grammar dlrun sends, and an empty list
answered as GCE answers it, without `items` (cloud.google.com/compute/docs/reference/rest/v1/instances/list).
Not reproduced: other operators (!=, <, ~), OR, nested fields other than labels, paging (every list is one page).
"""
from __future__ import annotations

import re

from tests.support.gce_errors import bad_request


def filtered(items: list[dict], query: dict) -> list[dict]:
    """The subset of GCE's filter grammar dlrun sends: `field = "v"`, `labels.k = "v"`, `labels.k:*`,
    joined by AND, each term optionally in parentheses."""
    text = (query.get("filter") or [""])[0].strip()
    if not text:
        return items
    terms = [t.strip().strip("()").strip() for t in re.split(r"\)?\s+AND\s+\(?", text)]
    out = items
    for term in terms:
        m = re.fullmatch(r'([\w.-]+)\s*(=|eq|:)\s*"?([^"]*)"?', term)
        if not m:
            raise bad_request(f"Invalid list filter expression '{text}'.")
        key, op, value = m.groups()

        def lookup(item, key=key):
            if key.startswith("labels."):
                return (item.get("labels") or {}).get(key[len("labels."):])
            return item.get(key)
        if op == ":" and value == "*":
            out = [i for i in out if lookup(i) is not None]
        else:
            out = [i for i in out if lookup(i) == value]
    return out


def listing(kind: str, items: list[dict]) -> dict:
    return {"kind": kind, "items": items} if items else {"kind": kind}
