"""Builds the optional C half of the broker's hot path (brokerd/csrc/); everything else is in pyproject.toml.

A machine without a C compiler still installs: the build failure is reported and the pure-Python code paths
are used (brokerd/native.py says which one is active)."""

from __future__ import annotations

import glob
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - no compiler / headers: fall back to pure Python
            print(f"brokerd._native not built ({exc}); using the pure-Python hot path", file=sys.stderr)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            print(f"brokerd._native not built ({exc}); using the pure-Python hot path", file=sys.stderr)


setup(
    ext_modules=[Extension("brokerd._native", sorted(glob.glob("brokerd/csrc/*.c")), depends=glob.glob("brokerd/csrc/*.h"),
                           extra_compile_args=["-O2", "-Wall"])],
    cmdclass={"build_ext": OptionalBuildExt},
)
