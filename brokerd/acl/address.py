"""White remote address patterns (RocketMQ's RemoteAddressStrategyFactory), pure.

A pattern is one of: blank (matches nothing), ``*`` / ``*.*.*.*`` (everything), an address (``192.168.0.1``,
IPv6 in any spelling), a comma list of addresses, ``192.168.1.{1,2,3}`` (a last-group set), or a range: the
first group from the second on that is ``*`` or ``a-b`` bounds it, the groups before it must be equal and the
groups after it are not compared (``192.168.*.*``, ``192.168.0.*``, ``192.168.1.1-100``, ``10.1-20.*.*``).
IPv6 ranges (RocketMQ accepts ``2::ac5:78:1-200``) are refused at load with a clear error; IPv6 addresses
and lists work.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass


class AddressPatternError(ValueError):
    pass


def normalize_ip(addr: str) -> str:
    """A peer address as patterns compare it: IPv4 dotted, IPv4-mapped IPv6 as IPv4, IPv6 fully expanded."""
    addr = addr.strip()
    if addr.startswith("[") and addr.endswith("]"):
        addr = addr[1:-1]
    try:
        ip = ipaddress.ip_address(addr.split("%", 1)[0])
    except ValueError:
        return addr
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return ip.exploded.upper()
    return str(ip)


@dataclass(frozen=True)
class AddressPattern:
    text: str
    everything: bool = False
    exact: frozenset[str] = frozenset()  # normalized addresses
    head: tuple[str, ...] = ()  # range: the equal groups before the bounded one (normalized text)
    lo: int = 0
    hi: int = -1

    def match(self, remote_ip: str) -> bool:
        if self.everything:
            return True
        ip = normalize_ip(remote_ip)
        if self.exact:
            return ip in self.exact
        if self.hi < 0:
            return False
        groups = ip.split(".")
        if len(groups) != 4:
            return False
        i = len(self.head)
        if len(groups) <= i or tuple(groups[:i]) != self.head:
            return False
        try:
            value = int(groups[i])
        except ValueError:
            return False
        return self.lo <= value <= self.hi


def _one_address(text: str) -> str:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        raise AddressPatternError(f"not an IP address: {text!r}") from None
    return normalize_ip(text)


def _range(text: str) -> AddressPattern:
    if ":" in text:
        raise AddressPatternError(f"IPv6 ranges are not supported (give the addresses): {text!r}")
    parts = [p.strip() for p in text.split(".")]
    if len(parts) != 4:
        raise AddressPatternError(f"an IPv4 pattern has 4 groups: {text!r}")
    for i in range(1, 4):
        if parts[i] == "*" or "-" in parts[i]:
            for p in parts[:i]:
                if not p.isdigit() or int(p) > 255:
                    raise AddressPatternError(f"bad group {p!r} in {text!r}")
            return _bounded(text, tuple(str(int(p)) for p in parts[:i]), parts[i])
    raise AddressPatternError(f"a range pattern needs '*' or 'a-b' after the first group: {text!r}")


def _bounded(text: str, head: tuple[str, ...], group: str) -> AddressPattern:
    if group == "*":
        return AddressPattern(text, head=head, lo=0, hi=255)
    lo_s, sep, hi_s = group.partition("-")
    try:
        lo, hi = int(lo_s), int(hi_s)
    except ValueError:
        raise AddressPatternError(f"bad range {group!r} in {text!r}") from None
    if not sep or not 0 <= lo <= hi <= 255:
        raise AddressPatternError(f"bad range {group!r} in {text!r}")
    return AddressPattern(text, head=head, lo=lo, hi=hi)


def parse_address_pattern(text: object) -> AddressPattern:
    """One whiteRemoteAddress / globalWhiteRemoteAddresses entry; AddressPatternError names what is wrong."""
    if text is None:
        return AddressPattern("")
    if not isinstance(text, str):
        raise AddressPatternError(f"not a string: {text!r}")
    t = text.strip()
    if not t:
        return AddressPattern("")
    if t in ("*", "*.*.*.*", "*:*:*:*:*:*:*:*"):
        return AddressPattern(t, everything=True)
    if t.endswith("}"):
        head, brace, inner = t.partition("{")
        if not brace or not inner.endswith("}") or not head or head[-1] not in ".:":
            raise AddressPatternError(f"bad address set {t!r}")
        items = [x.strip() for x in inner[:-1].split(",") if x.strip()]
        return AddressPattern(t, exact=frozenset(_one_address(head + x) for x in items))
    if "," in t:
        return AddressPattern(t, exact=frozenset(_one_address(x.strip()) for x in t.split(",") if x.strip()))
    if "*" in t or "-" in t:
        return _range(t)
    return AddressPattern(t, exact=frozenset({_one_address(t)}))
