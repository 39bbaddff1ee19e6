"""The one observer the CLI renders: a rich progress bar on stderr while kernel cases run.

Library code reports through the observer protocol (on_start / on_case / on_done) and never
prints; JSON mode and non-terminals get no observer at all.
"""

from __future__ import annotations

from typing import Any, Optional

from doctor.model import CaseResult


class RichProgress:
    """doctor.verify.runner.Observer as a rich progress bar."""

    def __init__(self) -> None:
        self._progress: Optional[Any] = None
        self._task: Optional[int] = None
        self._bad = 0

    def on_start(self, total: int) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            TextColumn("kernels"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.description}"),
            console=Console(stderr=True),
            transient=True,
        )
        self._progress.start()
        self._task = self._progress.add_task("", total=total)

    def on_case(self, result: CaseResult) -> None:
        if self._progress is None or self._task is None:
            return
        if result.status in ("failed", "crashed", "timeout"):
            self._bad += 1
        note = f"{result.id}: {result.status}" + (f" · {self._bad} bad" if self._bad else "")
        self._progress.update(self._task, advance=1, description=note)

    def on_done(self, run: Any = None) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
