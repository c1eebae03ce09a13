"""The results file: one JSON line per PairResult, appended with a single write(2) as
each pair finishes, so a crash or SIGKILL loses no finished pair (a torn last line,
the write the kill cut short, is skipped when the file is read back)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import ValidationError

from ._records import PairResult

__all__ = ["ResultStore"]


class ResultStore:
    def __init__(self, path: Path, *, resume: bool) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.results: list[PairResult] = self.read(path) if resume and path.exists() else []
        if not resume and path.exists():
            path.unlink()
        elif resume and path.exists():
            self._truncate_torn(path)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    @staticmethod
    def read(path: Path) -> list[PairResult]:
        out = []
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            try:
                out.append(PairResult.model_validate_json(line))
            except (ValidationError, json.JSONDecodeError):
                continue  # a torn last line
        return out

    @staticmethod
    def _truncate_torn(path: Path) -> None:
        data = path.read_bytes()
        if data and not data.endswith(b"\n"):
            path.write_bytes(data[: data.rfind(b"\n") + 1])

    def done(self) -> set[tuple[str, tuple[int, ...], str, str]]:
        """(task, group, setting, merge) of every stored result."""
        return {(r.task, r.group, r.setting, r.merge) for r in self.results}

    def append(self, results: list[PairResult]) -> None:
        """Store a unit's results: one write of whole lines, then they count as done."""
        data = "".join(r.model_dump_json() + "\n" for r in results).encode()
        os.write(self._fd, data)
        self.results.extend(results)

    def close(self) -> None:
        os.close(self._fd)
