"""Command-line options with the semantics of Apache commons-cli's DefaultParser, which RocketMQ's mqadmin uses
(pure). Option letters may have more than one character (`-bn`); values are given as `-t T`, `-tT`, `--topic T`,
`--topic=T`, `-topic T`; a unique prefix of a long name is accepted; a repeated option keeps its first value.

`parse` raises `UsageError` with commons-cli's own messages ("Missing required option: t", "Unrecognized option:
-x", "Missing argument for option: t"); `help_text` renders HelpFormatter's usage and option table."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

HELP_WIDTH = 110
_NEGATIVE_NUMBER = re.compile(r"^-\d+(\.\d+)?$")


class UsageError(ValueError):
    """The command line does not fit the command's options; nothing was sent anywhere."""


@dataclass(frozen=True)
class Opt:
    short: str | None
    long: str | None
    has_arg: bool
    desc: str
    required: bool = False

    @property
    def key(self) -> str:
        """The name commons-cli identifies the option by (its short name, else its long name)."""
        return self.short or (self.long or "").strip()

    @property
    def long_name(self) -> str:
        """The long name as typed (RocketMQ declares a few with a trailing space: accepted without it)."""
        return (self.long or "").strip()


@dataclass(frozen=True)
class Group:
    """Mutually exclusive options; a required group needs exactly one of them."""

    opts: tuple[Opt, ...]
    required: bool = False


Spec = Sequence[Opt | Group]

# what every mqadmin command accepts (ServerUtil.buildCommandlineOptions)
COMMON: tuple[Opt, ...] = (
    Opt("h", "help", False, "Print help"),
    Opt("n", "namesrvAddr", True, "Name server address list, eg: '192.168.0.1:9876;192.168.0.2:9876'"),
)


@dataclass
class Parsed:
    """The options given: values by key (first occurrence), flags as present keys; `args` the leftover words."""

    values: dict[str, str] = field(default_factory=dict)
    args: list[str] = field(default_factory=list)

    def has(self, key: str) -> bool:
        return key in self.values

    def get(self, key: str, default: str | None = None) -> str | None:
        v = self.values.get(key)
        return default if v is None else v.strip()

    def req(self, key: str) -> str:
        v = self.values.get(key)
        if v is None:
            raise UsageError(f"Missing required option: {key}")
        return v.strip()


def all_opts(spec: Spec) -> list[Opt]:
    out: list[Opt] = []
    for item in spec:
        out.extend(item.opts if isinstance(item, Group) else (item,))
    return out


def _merged(spec: Spec) -> list[Opt]:
    """commons-cli's Options: a later option with the same short name replaces the earlier one."""
    by_key: dict[str, Opt] = {}
    for o in [*COMMON, *all_opts(spec)]:
        by_key[o.key] = o
    return list(by_key.values())


class _Matcher:
    def __init__(self, opts: list[Opt]) -> None:
        self.opts = opts
        self.by_short = {o.short: o for o in opts if o.short}
        self.by_long = {o.long_name: o for o in opts if o.long_name}

    def long_matches(self, name: str) -> list[Opt]:
        if name in self.by_long:
            return [self.by_long[name]]
        return [o for n, o in self.by_long.items() if n.startswith(name)]

    def is_option(self, token: str) -> bool:
        if not token.startswith("-") or token == "-" or _NEGATIVE_NUMBER.match(token):
            return False
        if token.startswith("--"):
            return bool(self.long_matches(token[2:].partition("=")[0]))
        name = token[1:].partition("=")[0]
        return name in self.by_short or name in self.by_long or token[1:2] in self.by_short


def _take_value(o: Opt, tokens: list[str], i: int, m: _Matcher, given: str | None) -> tuple[str, int]:
    if given is not None:
        return given, i
    if i < len(tokens) and not m.is_option(tokens[i]):
        return tokens[i], i + 1
    raise UsageError(f"Missing argument for option: {o.key}")


def _resolve(token: str, m: _Matcher) -> tuple[Opt, str | None]:
    """The option a token names and the value attached to it, if any."""
    if token.startswith("--"):
        name, eq, val = token[2:].partition("=")
        found = m.long_matches(name)
        if not found:
            raise UsageError(f"Unrecognized option: {token}")
        if len(found) > 1:
            names = ", ".join(sorted(o.long_name for o in found))
            raise UsageError(f"Ambiguous option: '--{name}'  (could be: {names})")
        return found[0], (val if eq else None)
    body = token[1:]
    name, eq, val = body.partition("=")
    if name in m.by_short:
        return m.by_short[name], (val if eq else None)
    if name in m.by_long:
        return m.by_long[name], (val if eq else None)
    for size in range(len(body) - 1, 0, -1):  # -tTopic: the longest option name that prefixes the token
        if body[:size] in m.by_short and m.by_short[body[:size]].has_arg:
            return m.by_short[body[:size]], body[size:]
    raise UsageError(f"Unrecognized option: {token}")


def parse(spec: Spec, argv: Sequence[str]) -> Parsed:
    m = _Matcher(_merged(spec))
    out = Parsed()
    tokens = list(argv)
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if token == "--":
            out.args.extend(tokens[i:])
            break
        if not token.startswith("-") or token == "-" or _NEGATIVE_NUMBER.match(token):
            out.args.append(token)
            continue
        o, attached = _resolve(token, m)
        if o.has_arg:
            value, i = _take_value(o, tokens, i, m, attached)
        else:
            value = ""
        out.values.setdefault(o.key, value)
    _check(spec, out)
    return out


def _check(spec: Spec, out: Parsed) -> None:
    missing: list[str] = []
    for item in spec:
        if isinstance(item, Group):
            chosen = [o.key for o in item.opts if out.has(o.key)]
            if len(chosen) > 1:
                raise UsageError(f"The option '{chosen[1]}' was specified but an option from this group has "
                                 f"already been selected: '{chosen[0]}'")
            if item.required and not chosen:
                missing.append("[" + ", ".join(f"-{o.key} {o.desc}" for o in item.opts) + "]")
        elif item.required and not out.has(item.key):
            missing.append(item.key)
    if missing:
        raise UsageError(f"Missing required option{'s' if len(missing) > 1 else ''}: {', '.join(missing)}")


# -- HelpFormatter -------------------------------------------------------------------------------------------------

def _usage_item(o: Opt, required: bool) -> str:
    s = f"-{o.short}" if o.short else f"--{o.long_name}"
    if o.has_arg:
        s += " <arg>"
    return s if required else f"[{s}]"


def _wrap(text: str, width: int, indent: int) -> list[str]:
    lines: list[str] = []
    while len(text) > width:
        cut = text.rfind(" ", indent + 1, width + 1)
        if cut <= indent:
            cut = width
        lines.append(text[:cut].rstrip())
        text = " " * indent + text[cut:].lstrip()
    lines.append(text)
    return lines


def usage_line(command: str, spec: Spec) -> str:
    """HelpFormatter.printUsage: options sorted by name; a group printed at its first member (`-b <arg> | -c <arg>`,
    bracketed unless required), every option followed by a space but the last."""
    groups = {o.key: g for g in spec if isinstance(g, Group) for o in g.opts}
    parts, done = [], set()
    for o in sorted(_merged(spec), key=lambda o: o.key.lower()):
        g = groups.get(o.key)
        if g is None:
            parts.append(_usage_item(o, o.required))
        elif id(g) in done:
            parts.append("")
        else:
            done.add(id(g))
            body = " | ".join(_usage_item(m, True) for m in sorted(g.opts, key=lambda m: m.key.lower()))
            parts.append(body if g.required else f"[{body}]")
    return f"usage: mqadmin {command} " + " ".join(parts)


def help_text(command: str, spec: Spec, width: int = HELP_WIDTH) -> str:
    """HelpFormatter.printHelp("mqadmin " + command, options, true) at width 110."""
    usage = usage_line(command, spec)
    lines = _wrap(usage, width, usage.index(" ") + 1)
    rows = []
    for o in sorted(_merged(spec), key=lambda o: o.key.lower()):
        left = f" -{o.short}" + (f",--{o.long}" if o.long_name else "") if o.short else f"    --{o.long}"
        if o.has_arg:
            left += " <arg>"
        rows.append((left, o.desc))
    pad = max((len(left) for left, _ in rows), default=0) + 3
    for left, desc in rows:
        lines.extend(_wrap(left.ljust(pad) + desc, width, pad))
    return "\n".join(lines) + "\n"


def describe(opts: Iterable[Opt]) -> str:
    return ", ".join(f"-{o.short}" if o.short else f"--{o.long_name}" for o in opts)
