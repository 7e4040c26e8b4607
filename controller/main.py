"""`mqcontroller -c conf/controller/3n/controller-n0.conf [-p]`: run one controller member.

-c  RocketMQ-style `key=value` controller config; -p  print the effective configuration and exit.
An invalid value stops start-up with an error naming the key (exit code 1).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import signal
import sys
import time

import structlog

from brokerd.logging_setup import configure as configure_logging
from controller.config import ConfigError, config_from_properties, ignored_keys, parse_properties
from controller.daemon import ControllerDaemon

log = structlog.get_logger(component="controller_main")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mqcontroller", description="RocketMQ-compatible controller (Raft master election)")
    p.add_argument("-c", "--configFile", dest="config_file", required=True, help="controller config properties file")
    p.add_argument("-p", "--printConfigItem", dest="print_config", action="store_true",
                   help="print all config items and exit")
    p.add_argument("--logLevel", dest="log_level", default="INFO", help="log level (default INFO)")
    return p


def _watch_gc() -> None:
    """Log long garbage-collector pauses: they show up directly as request and heartbeat latency."""
    started: list[float] = []

    def cb(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[:] = [time.perf_counter()]
        elif started:
            ms = (time.perf_counter() - started[0]) * 1000
            if ms > 20:
                log.warning("gc_pause", generation=info.get("generation"), ms=round(ms, 1),
                            collected=info.get("collected"))

    gc.callbacks.append(cb)


async def serve(daemon: ControllerDaemon) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await daemon.start()
    metrics = daemon.metrics.port if daemon.metrics else "-"
    print(f"The Controller boot success. id={daemon.cfg.self_id} address={daemon.cfg.self_addr} "
          f"metrics port {metrics}", flush=True)
    try:
        await stop.wait()
    finally:
        await daemon.stop()


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        with open(args.config_file, encoding="utf-8") as f:
            props = parse_properties(f.read())
        cfg = config_from_properties(props)
    except OSError as e:
        print(f"mqcontroller: cannot read config file: {e}", file=sys.stderr)
        return 1
    except ConfigError as e:
        print(f"mqcontroller: invalid configuration: {e}", file=sys.stderr)
        return 1
    if args.print_config:
        for k, v in sorted(cfg.to_properties().items()):
            print(f"{k}={v}")
        return 0
    configure_logging(args.log_level)
    unknown = ignored_keys(props)
    if unknown:
        log.warning("controller_config_keys_ignored", keys=unknown)
    _watch_gc()
    import uvloop

    try:
        uvloop.run(serve(ControllerDaemon(cfg)))
    except OSError as e:
        print(f"mqcontroller: cannot start: {e}", file=sys.stderr)
        return 1
    print("The Controller shutdown.", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
