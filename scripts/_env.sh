# Shared by scripts/run and scripts/test: create/update the project venv and install the project.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
if ! "$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
  echo "Python 3.11+ is required (found: $("$PY" --version 2>&1))" >&2
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq python3 python3-venv >/dev/null
  fi
fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv || { apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null && "$PY" -m venv .venv; }
fi
# the C half of the hot path (brokerd/csrc/) needs a C compiler; without one the install still works and
# the pure-Python path is used (slower), so install gcc when it is missing and we can
inc="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
if { ! command -v gcc >/dev/null 2>&1 || [ ! -f "$inc/Python.h" ]; } && command -v apt-get >/dev/null 2>&1 \
    && [ "$(id -u)" = 0 ]; then
  apt-get update -qq && apt-get install -y -qq gcc libc6-dev python3-dev >/dev/null || true
fi
# libcrypto's headers: the C send lane's ACL signature check hashes with its SHA-1 (setup.py; without them it
# hashes through Python's hashlib, slower)
if [ ! -f /usr/include/openssl/sha.h ] && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  apt-get update -qq && apt-get install -y -qq libssl-dev >/dev/null || true
fi
# reinstall when the packaging or the C source changed since the last install, or the module is missing
stamp=.venv/.installed-$(cat pyproject.toml setup.py brokerd/csrc/* | sha1sum | cut -c1-12)-${1:-run}
if [ ! -f "$stamp" ] || ! ls brokerd/_native*.so >/dev/null 2>&1; then
  .venv/bin/pip install -q --upgrade pip >/dev/null 2>&1 || true
  if [ "${1:-run}" = test ]; then .venv/bin/pip install -q -e '.[test]'; else .venv/bin/pip install -q -e .; fi
  touch "$stamp"
fi
