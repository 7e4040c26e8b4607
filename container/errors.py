"""`ContainerError`: a container operation (add/remove/change a hosted broker) failed; `code` is the remoting
response code the admin port answers with."""

from __future__ import annotations


class ContainerError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
