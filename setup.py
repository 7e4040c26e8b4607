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


def _has(header: str, lib: str) -> bool:
    """A C header under /usr/include and its shared library in a usual library directory."""
    import sysconfig

    libdirs = ["/usr/lib", "/usr/lib64", "/usr/local/lib", f"/usr/lib/{sysconfig.get_config_var('MULTIARCH') or ''}"]
    return os.path.exists(f"/usr/include/{header}") and any(os.path.exists(os.path.join(d, lib)) for d in libdirs)


# libcrypto's headers and link library (libssl-dev): the C send lane's ACL signature check hashes with its SHA-1;
# without them it hashes through Python's hashlib (slower, same result)
_SSL = _has("openssl/sha.h", "libcrypto.so") and not os.environ.get("BROKERD_NO_OPENSSL")  # the hashlib path, e.g. to test it
# zlib's header and link library (zlib1g-dev): the C send lane's body CRC-32 (crc.c) calls zlib itself for what it
# does not fold with PCLMULQDQ; without them it calls zlib.crc32 through Python (the same function, ~0.1 µs more)
_ZLIB = _has("zlib.h", "libz.so") and not os.environ.get("BROKERD_NO_ZLIB")

setup(
    ext_modules=[Extension("brokerd._native", sorted(glob.glob("brokerd/csrc/*.c")), depends=glob.glob("brokerd/csrc/*.h"),
                           extra_compile_args=["-O2", "-Wall"],
                           define_macros=[("BROKERD_OPENSSL", "1")] * _SSL + [("BROKERD_ZLIB", "1")] * _ZLIB,
                           libraries=["crypto"] * _SSL + ["z"] * _ZLIB)],
    cmdclass={"build_ext": OptionalBuildExt},
)
