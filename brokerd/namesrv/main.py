"""`mqnamesrv [-c conf/namesrv.conf] [-p]`: run the name server (RocketMQ's NamesrvStartup options).

-c  config file of `key=value` lines (`listenPort=9876`, ...); -p  print the effective configuration and exit.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

import structlog

from brokerd.config_file import ConfigError, build_config, config_to_properties, read_properties, to_properties
from brokerd.namesrv.config import NamesrvConfig
from brokerd.namesrv.service import start_server

log = structlog.get_logger(component="namesrv")


def configure_logging(level: int = logging.INFO) -> None:
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.KeyValueRenderer(key_order=["timestamp", "level", "event", "component"], drop_missing=True),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )


def load_config(path: str | None) -> NamesrvConfig:
    props = read_properties(path) if path else {}
    acl = props.get("aclFilePath")
    if path and acl and not os.path.isabs(acl):  # relative to the config file
        props["aclFilePath"] = os.path.join(os.path.dirname(os.path.abspath(path)), acl)
    return build_config(NamesrvConfig, props)


async def serve(cfg: NamesrvConfig, config_path: str | None = None) -> None:
    """Run until SIGTERM or SIGINT, then stop gracefully (UPDATE_NAMESRV_CONFIG writes back to ``config_path``)."""
    svc, server = await start_server(cfg, config_path=config_path)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"The Name Server boot success. serializeType=JSON, address {cfg.bind_address}:{server.port}", flush=True)
    try:
        await stop.wait()
    finally:
        log.info("namesrv_stopping")
        await svc.stop()
        await server.stop(grace=3.0)
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mqnamesrv", description="RocketMQ-compatible name server")
    p.add_argument("-c", "--configFile", dest="config_file", help="name server config properties file")
    p.add_argument("-p", "--printConfigItem", dest="print_config", action="store_true",
                   help="print all config items and exit")
    p.add_argument("-n", "--namesrvAddr", dest="namesrv_addr", help="accepted for compatibility; ignored")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        cfg = load_config(args.config_file)
    except ConfigError as e:
        print(f"mqnamesrv: invalid configuration: {e}", file=sys.stderr)
        return 1
    if args.print_config:
        sys.stdout.write(to_properties(config_to_properties(cfg)))
        return 0
    configure_logging()
    import uvloop

    try:
        uvloop.run(serve(cfg, args.config_file))
    except ConfigError as e:
        print(f"mqnamesrv: invalid configuration: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"mqnamesrv: cannot listen on {cfg.bind_address}:{cfg.listen_port}: {e}", file=sys.stderr)
        return 1
    print("The Name Server shutdown.", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
