"""The real RocketMQ client (C++ core, ``tests/clients/rmq_client.py`` in ``$ROCKETMQ_CLIENT_PYTHON`` /
``.venv-client``) as one more producer: every ``send_sync`` it acknowledges becomes an acknowledged ``Send``
with id ``rc-<i>`` (the ``seq`` property the read-back finds). It finds brokers through the name server, so
in proxy mode it bypasses the proxies (docs/chaos.md)."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from tests.support import CLIENT_PY, CLIENT_SCRIPT

from .history import History, Send
from .workload import RC_TOPIC


def available() -> bool:
    return os.path.exists(CLIENT_PY)


class RealProducer:
    def __init__(self, namesrv: str, bset: str, log_dir: Path, t0: float, count: int = 1_000_000) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "NAMESRV": namesrv, "TOPIC": RC_TOPIC, "GROUP": "ChaosRCGroup", "COUNT": str(count),
               "SEND_TIMEOUT_MS": "3000", "LOG_DIR": str(log_dir)}
        self.bset, self.t0 = bset, t0
        self.wall_t0 = time.time() - (time.monotonic() - t0)
        self.rows: list[tuple[float, dict[str, Any]]] = []
        self.proc = subprocess.Popen([CLIENT_PY, CLIENT_SCRIPT, "produce"], stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env, cwd=str(log_dir))
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.rows.append((time.monotonic() - self.t0, json.loads(line)))
            except ValueError:
                continue

    def stop(self, h: History) -> None:
        """Stop the client and add its sends to the history."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self._reader.join(10)
        for ret, row in self.rows:
            if "sent" not in row:
                continue
            call = row.get("sent_at_ms", 0) / 1000 - self.wall_t0 if "sent_at_ms" in row else ret
            ok = row.get("status") in ("OK", "SEND_OK")
            h.sends.append(Send(f"rc-{row['sent']}", self.bset, RC_TOPIC, "rc", int(row["sent"]), -1, call,
                                ret if ok or "status" in row else None, ok))
