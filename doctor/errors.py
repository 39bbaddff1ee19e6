"""Exit codes and the error types that cross the single error boundary in the CLI.

Library code raises a `DoctorError` subclass; `doctor.cli.main` turns it into one line on
stderr and the matching exit code. Nothing else reaches the user as a traceback.
"""

from __future__ import annotations

import enum
from typing import Optional


class ExitCode(enum.IntEnum):
    OK = 0  # nothing at or above the failure threshold
    FINDINGS = 1  # findings at or above --fail-on (or unresolved fixes for `fix`)
    USAGE = 2  # bad flags, malformed or unreadable input files
    INTERNAL = 3  # a bug in attn-doctor itself: please report it
    INCOMPLETE = 4  # --distributed: a rank did not answer within the timeouts


class DoctorError(Exception):
    """Base class: a problem we can explain in one line."""

    exit_code: ExitCode = ExitCode.INTERNAL

    def __init__(
        self,
        message: str,
        *,
        path: Optional[str] = None,
        line: Optional[int] = None,
        hint: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.line = line
        self.hint = hint

    def one_line(self) -> str:
        where = ""
        if self.path:
            where = f"{self.path}:{self.line}: " if self.line else f"{self.path}: "
        hint = f" ({self.hint})" if self.hint else ""
        return f"{where}{self.message}{hint}"


class InputError(DoctorError):
    """A user-supplied file or flag is unreadable or malformed (exit 2)."""

    exit_code = ExitCode.USAGE


class RuleError(InputError):
    """A rule file fails its schema or refers to unknown facts (exit 2)."""


class WriteError(DoctorError):
    """A file the user asked us to write could not be written; the old file is intact."""

    exit_code = ExitCode.USAGE
