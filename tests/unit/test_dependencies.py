"""The code's dependency rules (docs/ARCHITECTURE.md), checked so that a new import circle, a layer skipped
or a reach into another module's private names fails CI with a message naming it."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("brokerd", "container", "controller")
# underscore names that are public API of the standard library
STDLIB_PUBLIC = {("os", "_exit"), ("sys", "_getframe")}
NAMEDTUPLE_API = {"_replace", "_asdict", "_fields", "_make", "_field_defaults"}


def test_import_linter_contracts_are_kept() -> None:
    """Layers (container → broker → processors → context → metadata/store → message → remoting), the controller
    independent of the broker, and no import circles (imports under TYPE_CHECKING count)."""
    lint = Path(sys.executable).with_name("lint-imports")
    res = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, f"import-linter contracts broken:\n{res.stdout}\n{res.stderr}"


def _private_uses(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            value = node.value
            if isinstance(value, ast.Name) and (value.id in ("self", "cls") or (value.id, node.attr) in STDLIB_PUBLIC):
                continue
            if node.attr not in NAMEDTUPLE_API:
                out.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom):
            out += [f"{path.relative_to(ROOT)}:{node.lineno}: from {node.module} import {a.name}"
                    for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
    return out


def test_no_module_uses_another_modules_private_names() -> None:
    """Only an object's own methods touch its `_private` members: other modules go through public methods."""
    found = [use for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py")) for use in _private_uses(p)]
    assert not found, "private names used from outside their class/module:\n" + "\n".join(found)


_C_DEF = re.compile(r"^(?!static\b)[A-Za-z_][\w \*]*?\b(\w+)\s*\([^;]*$", re.M)


def test_c_files_depend_one_way() -> None:
    """brokerd/csrc: no .c file includes another, and the calls between .c files form no circle
    (e.g. lane.c calls into lane_send.c through lane.h, never the other way)."""
    csrc = ROOT / "brokerd" / "csrc"
    files = {p.name: p.read_text(encoding="utf-8") for p in sorted(csrc.glob("*.c"))}
    assert not [n for n, text in files.items() if re.search(r'#include\s+"\w+\.c"', text)]
    defined = {n: {m.group(1) for m in _C_DEF.finditer(text)} - {"if", "while", "for", "switch", "return"}
               for n, text in files.items()}
    uses = {n: {o for o in files if o != n and any(re.search(rf"\b{f}\s*\(", text) for f in defined[o])}
            for n, text in files.items()}

    def reaches(a: str, b: str, seen: set[str]) -> bool:
        return any(x == b or (x not in seen and reaches(x, b, seen | {x})) for x in uses[a])

    circles = sorted(f"{a} ⇄ {b}" for a in files for b in uses[a] if reaches(b, a, {b}))
    assert not circles, f"C files calling each other: {circles}"
    assert "lane_send.c" in uses["lane.c"]  # the check sees real calls
