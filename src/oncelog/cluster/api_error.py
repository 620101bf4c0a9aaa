"""The error a controller decision answers with: a Kafka error code and a message for the user (Kafka's ApiError)."""

from __future__ import annotations

from dataclasses import dataclass

from ..protocol.errors import ErrorCode

__all__ = ["ApiError", "NO_ERROR"]


@dataclass(frozen=True, slots=True)
class ApiError:
    code: ErrorCode
    message: str | None = None

    @property
    def ok(self) -> bool:
        return self.code is ErrorCode.NONE

    def __str__(self) -> str:
        return self.code.name if self.message is None else f"{self.code.name}: {self.message}"


NO_ERROR = ApiError(ErrorCode.NONE)
