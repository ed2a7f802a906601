"""README.md's "Adding a node" steps, read at run time, so the lab adds a node exactly as an admin is told to.

    steps = parse(Path("README.md").read_text())          # or ReadmeError, naming what changed
    lab_steps = substitute(steps, {"node1": "node2", ...})

The block is the fenced code block after the paragraph that starts with "**Adding a node**". Its
grammar, line by line (anything else is an error naming the line):

* ``COMMAND   # on WHERE[: remark]``   run COMMAND as root on WHERE; a command without that
  comment runs where the previous one ran;
* ``cat > FILE <<'TAG'`` ... ``TAG``    one step (the whole heredoc) on the same terms;
* ``# copy FILE[, FILE] and FILE from WHERE to [DIR on] WHERE``   files carried between machines;
  a relative name on the CA's machine is in the directory the request was copied to (where
  ``pki sign`` writes the certificate);
* ``# remark``                          nothing to do.

WHERE is one of PLACES: the node being added, the CA's machine, or an admin's machine (where
gleanctl has an admin's certificate). The block's own example names (node1, its host name, the
controller's address, the CA directory) are the PLACEHOLDERS the lab replaces with its own.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Callable, Protocol

# The example names the README's block uses, which the lab replaces (substitute()); each must
# appear in the block, or the lab would silently run a step with the README's example in it.
PLACEHOLDERS = ("node1.example.org", "ctl.example.org:7450", "/root/gleaner-ca", "node1")
# WHERE phrases, as the README writes them, and the machine each names.
PLACES = {"node1": "node", "the CA's machine": "ca", "an admin's machine": "admin"}
HEADING = "**Adding a node**"


class ReadmeError(ValueError):
    """README.md's "Adding a node" block is missing or no longer has the shape the lab reads."""


@dataclass(frozen=True)
class Step:
    """One thing the README tells the admin to do."""
    line: int                    # in README.md, 1-based, for messages
    where: str                   # "node", "ca" or "admin" (PLACES' values)
    command: str = ""            # a shell command (a heredoc's whole text), for kind "run"
    files: tuple[str, ...] = ()  # for kind "copy"
    to: str = ""                 # for kind "copy": the receiving machine
    to_dir: str = ""             # ... and the directory there ("" = where the CA's files are worked on)

    @property
    def kind(self) -> str:
        return "copy" if self.files else "run"


def block(text: str) -> tuple[int, list[str]]:
    """(the line number of the block's first line, its lines) for the fenced block after HEADING."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(HEADING)), None)
    if start is None:
        raise ReadmeError(f"README.md has no paragraph starting with {HEADING!r}: the lab adds a node by its steps")
    fence = next((i for i in range(start + 1, min(start + 6, len(lines))) if lines[i].startswith("```")), None)
    if fence is None:
        raise ReadmeError(f"README.md line {start + 1}: no ``` code block within 5 lines after {HEADING!r}")
    end = next((i for i in range(fence + 1, len(lines)) if lines[i].startswith("```")), None)
    if end is None:
        raise ReadmeError(f"README.md line {fence + 1}: the 'Adding a node' code block is never closed")
    return fence + 2, lines[fence + 1:end]


def place(phrase: str, line: int) -> str:
    phrase = phrase.strip()
    if phrase not in PLACES:
        raise ReadmeError(f"README.md line {line}: {phrase!r} is not a place the lab knows; "
                          f"known: {', '.join(PLACES)} (vagrant/readme_steps.py PLACES)")
    return PLACES[phrase]


WHERE_COMMENT = re.compile(r"^(?P<command>.*?\S)\s+#\s*on (?P<where>[^:]+?)(?::.*)?$")
COPY = re.compile(r"^#\s*copy (?P<files>.+?) from (?P<src>.+?) to (?:(?P<dir>/\S*) on )?(?P<dest>.+?)[,.:]?$")
HEREDOC = re.compile(r"<<-?\s*'?(?P<tag>[A-Za-z_]+)'?")


def copy_step(text: str, line: int) -> Step:
    match = COPY.match(text)
    if not match:
        raise ReadmeError(f"README.md line {line}: a copy must read '# copy FILE[, FILE] and FILE from WHERE to "
                          f"[DIR on] WHERE', not {text!r}")
    files = tuple(f.strip() for f in re.split(r",\s*|\s+and\s+", match["files"]) if f.strip())
    if any(" " in f for f in files):
        raise ReadmeError(f"README.md line {line}: cannot tell the files apart in {match['files']!r}")
    return Step(line=line, where=place(match["src"], line), files=files, to=place(match["dest"], line),
                to_dir=match["dir"] or "")


def parse(text: str) -> list[Step]:
    """The steps of README.md's 'Adding a node' block, in order; ReadmeError when it changed shape."""
    first, lines = block(text)
    steps: list[Step] = []
    where = ""
    i = 0
    while i < len(lines):
        number, raw = first + i, lines[i]
        stripped = raw.strip()
        i += 1
        if not stripped:
            continue
        if stripped.startswith("#"):
            if re.match(r"#\s*copy\b", stripped):
                steps.append(copy_step(stripped, number))
            continue   # a remark
        match = WHERE_COMMENT.match(stripped)
        command = match["command"] if match else stripped
        if match:
            where = place(match["where"], number)
        if not where:
            raise ReadmeError(f"README.md line {number}: the first command does not say where it runs "
                              f"('# on {next(iter(PLACES))}: ...')")
        heredoc = HEREDOC.search(command)
        if heredoc:
            body = []
            while i < len(lines) and lines[i].strip() != heredoc["tag"]:
                body.append(lines[i])
                i += 1
            if i == len(lines):
                raise ReadmeError(f"README.md line {number}: the heredoc is not closed by a line {heredoc['tag']!r}")
            i += 1
            command = "\n".join([command, *body, heredoc["tag"]])
        steps.append(Step(line=number, where=where, command=command))
    if not steps:
        raise ReadmeError(f"README.md line {first}: the 'Adding a node' block has no steps")
    missing = [p for p in PLACEHOLDERS if not any(p in s.command or any(p in f for f in s.files) for s in steps)]
    if missing:
        raise ReadmeError(f"README.md's 'Adding a node' block no longer names {', '.join(missing)}, which the lab "
                          "replaces with its own names (vagrant/readme_steps.py PLACEHOLDERS)")
    return steps


def substitute(steps: list[Step], names: dict[str, str]) -> list[Step]:
    """The steps with each placeholder replaced by the lab's name for it (whole words only, longest
    first, so node1.example.org is replaced before node1)."""
    unknown = set(names) - set(PLACEHOLDERS)
    if unknown:
        raise ValueError(f"not placeholders of the README's block: {sorted(unknown)}; known: {PLACEHOLDERS}")
    pattern = re.compile("|".join(rf"(?<!\w){re.escape(p)}(?!\w)" for p in sorted(names, key=len, reverse=True)))

    def swap(text: str) -> str:
        return pattern.sub(lambda m: names[m.group(0)], text) if names else text
    return [replace(s, command=swap(s.command), files=tuple(swap(f) for f in s.files)) for s in steps]


class StepFailed(RuntimeError):
    """A README step failed where it ran: the message names the README line and what it said."""


class Machine(Protocol):
    """Where steps run: the node being added, the CA's machine, an admin's machine."""
    def run(self, command: str) -> str: ...
    def read(self, path: str) -> bytes: ...
    def write(self, directory: str, name: str, data: bytes) -> None: ...


class HostMachine:
    """This host as the CA's or an admin's machine: only gleanctl runs here (the README asks
    nothing else of those machines), this checkout's, in a working directory of its own where
    copied files land and relative names are read, with ENV added (GLEANER_CONFIG for the admin)."""

    def __init__(self, gleanctl: list[str], workdir: Path, env: dict[str, str] | None = None,
                 timeout: float = 300) -> None:
        self.gleanctl, self.workdir, self.env, self.timeout = gleanctl, workdir, env or {}, timeout

    def run(self, command: str) -> str:
        argv = shlex.split(command)
        if not argv or argv[0] != "gleanctl":
            raise StepFailed(f"the lab runs only gleanctl on this host, not {command!r}")
        done = subprocess.run([*self.gleanctl, *argv[1:]], cwd=self.workdir, text=True, capture_output=True,
                              env={**os.environ, **self.env}, timeout=self.timeout, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            raise StepFailed(f"exit {done.returncode}: {(done.stdout + done.stderr).strip()[-800:]}")
        return done.stdout

    def read(self, path: str) -> bytes:
        return (self.workdir / path).read_bytes()   # an absolute path stays itself

    def write(self, directory: str, name: str, data: bytes) -> None:
        target = Path(directory) if directory else self.workdir
        (target / name).write_bytes(data)


def follow(steps: list[Step], machines: dict[str, Machine], say: Callable[[str], None] = lambda text: None) -> list[dict]:
    """Carry out STEPS on MACHINES (by PLACES' values), in order; what each took, in seconds.
    The first failure stops it with StepFailed naming the README line."""
    done = []
    for step in steps:
        started = time.monotonic()
        what = (f"copy {', '.join(step.files)} from {step.where} to {step.to_dir or 'its work directory'} on {step.to}"
                if step.kind == "copy" else f"on {step.where}: {step.command.splitlines()[0]}")
        say(f"README.md line {step.line}: {what}")
        for needed in (step.where, step.to):
            if needed and needed not in machines:
                raise StepFailed(f"README.md line {step.line}: no machine for {needed!r} ({what})")
        try:
            if step.kind == "copy":
                for path in step.files:
                    machines[step.to].write(step.to_dir, PurePosixPath(path).name, machines[step.where].read(path))
            else:
                machines[step.where].run(step.command)
        except (StepFailed, OSError, subprocess.SubprocessError) as exc:
            raise StepFailed(f"README.md line {step.line} ({what}) failed: {exc}") from exc
        done.append({"line": step.line, "where": step.where, "kind": step.kind,
                     "seconds": round(time.monotonic() - started, 1)})
    return done
