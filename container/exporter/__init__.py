"""rocketmq-exporter's metrics (apache/rocketmq-exporter) on the container's ``/metrics``, next to its own series:
the same family names, label names and label values, computed in-process from the hosted brokers' state, so that
the Grafana dashboards and alert rules built for the exporter work unchanged (docs/exporter-metrics.md).

``families`` names them, ``runtime`` reads GET_BROKER_RUNTIME_INFO as the exporter does, ``collect`` computes the
per-broker figures (pure, in slices), ``clients`` asks the online consumers for their own figures, ``service``
drives a scrape."""

from container.exporter.service import Exporter

__all__ = ["Exporter"]
