"""What a mqadmin command is: its name, description, options (commons-cli semantics) and an async body that prints
what RocketMQ's SubCommand prints. A body raises AdminError / UsageError / ValueError to fail with one line."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TextIO

from brokerd.admin.client import AdminClient
from brokerd.admin.javafmt import java_int
from brokerd.admin.options import Group, Opt, Parsed, UsageError


@dataclass
class Ctx:
    opts: Parsed
    client: AdminClient
    out: TextIO = field(default_factory=lambda: sys.stdout)

    def write(self, text: str) -> None:
        self.out.write(text)

    def has(self, key: str) -> bool:
        return self.opts.has(key)

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.opts.get(key, default)

    def req(self, key: str) -> str:
        return self.opts.req(key)

    def int_opt(self, key: str, default: int) -> int:
        v = self.opts.get(key)
        return default if v is None else java_int(v, f"-{key}")


Body = Callable[[Ctx], Awaitable[None]]


@dataclass(frozen=True)
class Command:
    name: str
    desc: str
    spec: Sequence[Opt | Group]
    body: Body
    alias: str | None = None


def one_of(ctx: Ctx, *keys: str) -> str:
    """The key of the first of these options given; a UsageError naming them all when none is."""
    for k in keys:
        if ctx.has(k):
            return k
    raise UsageError("Missing required option: one of " + ", ".join(f"-{k}" for k in keys))


def parse_attributes(text: str) -> dict[str, str]:
    """AttributeParser.parseToMap: `+a=b,+c=d,-e` (an addition keeps its `+`, a deletion is `-key`)."""
    out: dict[str, str] = {}
    for item in (p.strip() for p in text.split(",") if p.strip()):
        if item.startswith("+"):
            k, eq, v = item.partition("=")
            if not eq or len(k) < 2:
                raise UsageError(f"attribute {item!r}: expected +key=value")
            out[k] = v
        elif item.startswith("-"):
            if "=" in item or len(item) < 2:
                raise UsageError(f"attribute {item!r}: a deletion is -key")
            out[item] = ""
        else:
            raise UsageError(f"attribute {item!r} must start with + (add) or - (delete)")
    return out
