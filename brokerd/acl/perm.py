"""RocketMQ ACL 1.0 permissions (acl/common/Permission.java): bits, their text form, the check."""

from __future__ import annotations

from typing import Final

DENY: Final = 1
ANY: Final = 1 << 1
PUB: Final = 1 << 2
SUB: Final = 1 << 3

_TEXT: Final = {"PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB, "DENY": DENY}


def parse_perm(text: object) -> int | None:
    """'PUB', 'SUB', 'PUB|SUB', 'SUB|PUB', 'DENY' -> bits; None for anything else (the caller names the key)."""
    if not isinstance(text, str):
        return None
    return _TEXT.get(text.strip())


def perm_text(perm: int) -> str:
    if perm & DENY:
        return "DENY"
    return "|".join(name for name, bit in (("PUB", PUB), ("SUB", SUB)) if perm & bit) or "DENY"


def check_permission(needed: int, owned: int) -> bool:
    """Permission.checkPermission: DENY refuses everything; ANY is PUB or SUB; otherwise a shared bit."""
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)
