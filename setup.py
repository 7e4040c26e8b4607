"""Builds the optional C half of the broker's hot path (brokerd/csrc/); everything else is in pyproject.toml.

A machine without a C compiler still installs: the build failure is reported and the pure-Python code paths
are used (brokerd/native.py says which one is active)."""

from __future__ import annotations

import glob
import os
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


def _openssl() -> bool:
    """libcrypto's headers and link library (libssl-dev): the C send lane's ACL signature check hashes with its
    SHA-1; without them it hashes through Python's hashlib (slower, same result)."""
    import sysconfig

    libdirs = ["/usr/lib", "/usr/lib64", "/usr/local/lib", f"/usr/lib/{sysconfig.get_config_var('MULTIARCH') or ''}"]
    return os.path.exists("/usr/include/openssl/sha.h") and any(
        os.path.exists(os.path.join(d, "libcrypto.so")) for d in libdirs)


_SSL = _openssl() and not os.environ.get("BROKERD_NO_OPENSSL")  # the hashlib path, e.g. to test it

setup(
    ext_modules=[Extension("brokerd._native", sorted(glob.glob("brokerd/csrc/*.c")), depends=glob.glob("brokerd/csrc/*.h"),
                           extra_compile_args=["-O2", "-Wall"],
                           define_macros=[("BROKERD_OPENSSL", "1")] if _SSL else [],
                           libraries=["crypto"] if _SSL else [])],
    cmdclass={"build_ext": OptionalBuildExt},
)
