"""The name server's KV configuration (namespace -> key -> value), optionally persisted as Java's kvConfig.json.

File format (KVConfigSerializeWrapper): `{"configTable":{"<namespace>":{"<key>":"<value>"}}}`.
"""

from __future__ import annotations

import os
import tempfile

import orjson

from brokerd.config_file import ConfigError
from brokerd.namesrv.lenient_json import LenientJSONError, loads

NAMESPACE_ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


class KVConfigError(ConfigError):
    """The KV config file cannot be loaded."""


class KVConfigTable:
    def __init__(self, path: str = "") -> None:
        """`path` empty: memory only. Otherwise the table is loaded from it and written back on every change."""
        self.path = path
        self.table: dict[str, dict[str, str]] = {}
        if path and os.path.exists(path):
            self.table = self._load(path)

    @staticmethod
    def _load(path: str) -> dict[str, dict[str, str]]:
        try:
            with open(path, "rb") as f:
                raw = loads(f.read())
        except (OSError, LenientJSONError) as e:
            raise KVConfigError(f"kvConfigPath: cannot read {path}: {e}") from e
        table = raw.get("configTable") if isinstance(raw, dict) else None
        if not isinstance(table, dict):
            raise KVConfigError(f"kvConfigPath: {path} has no configTable object")
        return {str(ns): {str(k): str(v) for k, v in kv.items()} for ns, kv in table.items() if isinstance(kv, dict)}

    def _persist(self) -> None:
        if not self.path:
            return
        data = orjson.dumps({"configTable": self.table}, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2)
        directory = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".kvConfig.", dir=directory)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    def put(self, namespace: str, key: str, value: str) -> None:
        ns = self.table.setdefault(namespace, {})
        if ns.get(key) == value:
            return
        ns[key] = value
        self._persist()

    def get(self, namespace: str, key: str) -> str | None:
        return self.table.get(namespace, {}).get(key)

    def delete(self, namespace: str, key: str) -> bool:
        ns = self.table.get(namespace)
        if ns is None or key not in ns:
            return False
        del ns[key]
        if not ns:
            del self.table[namespace]
        self._persist()
        return True

    def namespace(self, namespace: str) -> dict[str, str] | None:
        ns = self.table.get(namespace)
        return dict(ns) if ns else None
