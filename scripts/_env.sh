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
# reinstall only when pyproject.toml changed since the last install
stamp=.venv/.installed-$(sha1sum pyproject.toml | cut -c1-12)-${1:-run}
if [ ! -f "$stamp" ]; then
  .venv/bin/pip install -q --upgrade pip >/dev/null 2>&1 || true
  if [ "${1:-run}" = test ]; then .venv/bin/pip install -q -e '.[test]'; else .venv/bin/pip install -q -e .; fi
  touch "$stamp"
fi
