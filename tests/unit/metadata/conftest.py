from __future__ import annotations

from collections.abc import Iterator

import pytest

from brokerd.metadata import MetadataHub, RecordingObserver

from .helpers import make_hub


@pytest.fixture
def hub() -> MetadataHub:
    return make_hub()


@pytest.fixture
def recorder(hub: MetadataHub) -> Iterator[RecordingObserver]:
    rec = RecordingObserver()
    hub.add_observer(rec)
    yield rec
