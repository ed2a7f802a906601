"""A progress bar for long simulations, on stderr.

The engine calls it every few wall seconds with the share of simulated time done and a line of
figures; a run that ends before the first call shows nothing. On a terminal the bar is redrawn
in place; otherwise (a log file, a CI job) each call writes one line, so logs stay readable.
"""
from __future__ import annotations

import sys
from typing import TextIO


class ProgressBar:
    def __init__(self, stream: TextIO | None = None, width: int = 30, label: str = "sim") -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.label = label
        self.drawn = False      # a bar is on the terminal's current line

    @property
    def in_place(self) -> bool:
        isatty = getattr(self.stream, "isatty", None)
        return bool(isatty and isatty())

    def __call__(self, done: float, detail: str) -> None:
        done = min(max(done, 0.0), 1.0)
        filled = int(done * self.width)
        line = f"{self.label} [{'#' * filled}{'.' * (self.width - filled)}] {done:4.0%} {detail}"
        if self.in_place:
            self.stream.write("\r\x1b[K" + line)
            self.drawn = True
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def finish(self) -> None:
        """End the bar's line (on a terminal), so what follows starts on a line of its own."""
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = False
