"""`mqbrokercontainer -c conf/broker-container.conf`: run the broker container in the foreground."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys

import structlog
import uvloop

from brokerd import loopmon
from brokerd.config_file import ConfigError
from brokerd.logging_setup import configure
from container.config import ContainerConfig, load_container_config
from container.errors import ContainerError
from container.host import BrokerContainer


async def run(cfg: ContainerConfig) -> int:
    loopmon.install()  # loop stalls and collector pauses on /metrics
    container = BrokerContainer(cfg)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await container.start()
    except (ContainerError, OSError) as e:
        structlog.get_logger("container").error("container_start_failed", error=str(e))
        await container.stop()
        print(f"mqbrokercontainer: start failed: {e}", file=sys.stderr)
        return 1
    loopmon.freeze_heap()  # what start-up built is never scanned by a collection again
    admin = container.admin_server.port if container.admin_server else "-"
    metrics = container.metrics.port if container.metrics else "-"
    print(f"The broker container boot success. admin port {admin}, metrics port {metrics}, "
          f"brokers: {', '.join(sorted(container.brokers)) or 'none'}", flush=True)
    await stop.wait()
    await container.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="mqbrokercontainer", description="RocketMQ-compatible broker container")
    ap.add_argument("-c", "--configFile", dest="config", help="container config file (key=value)")
    ap.add_argument("-p", "--printConfigItem", action="store_true", help="print the effective config and exit")
    args = ap.parse_args(argv)
    try:
        cfg = load_container_config(args.config) if args.config else ContainerConfig()
    except ConfigError as e:
        print(f"mqbrokercontainer: invalid configuration: {e}", file=sys.stderr)
        return 2
    if args.printConfigItem:
        from brokerd.config_file import config_to_properties

        for k, v in config_to_properties(cfg).items():
            print(f"{k}={v}")
        return 0
    configure(os.environ.get("LOG_LEVEL", "INFO"))
    loopmon.freeze()  # the modules: start-up's collections need not scan them
    uvloop.install()
    return asyncio.run(run(cfg))


if __name__ == "__main__":
    sys.exit(main())
