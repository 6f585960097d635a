"""How files are written: whole or not at all (``write_atomic``), small records overwritten in place where a full disk
cannot refuse them (``InPlaceRecord``), and what a full or failing disk refused, counted by what was being written and
said at a steady rate (``RefusedWrites``: a kind's first refusal, then at most once a minute, and once written again)."""

from __future__ import annotations

import collections
import contextlib
import errno
import os
import time
from collections.abc import Callable
from typing import Any

SAY_EVERY_S = 60.0  # a kind of write refused again and again is said at most once per this many seconds


class RefusedWrites:
    """``attempt(what, fn, *args)`` runs a write; an OSError (or the RuntimeError torch.save raises for one) is counted
    under ``what`` and returned as False instead of raised. Said through ``echo``: the first refusal of a kind, then at
    most once per ``SAY_EVERY_S`` seconds of ``clock`` while its refusals go on (with the count so far), and one line
    when a kind whose refusal was said is written again. ``tag`` starts each line, ``going_on`` ends a refusal's."""

    def __init__(
        self,
        echo: Callable[[str], None],
        tag: str = "[MAIN]",
        going_on: str = "the run goes on",
        clock: Callable[[], float] = time.monotonic,
    ):
        self.echo, self.tag, self.going_on, self.clock = echo, tag, going_on, clock
        self.counts: collections.Counter[str] = collections.Counter()  # refused so far, by kind
        self._streak: dict[str, int] = {}  # kinds refused since their last write: refusals in a row
        self._said_at: dict[str, float] = {}  # by kind: when its refusal was last said
        self._unanswered: set[str] = set()  # kinds whose refusal was said and not yet a write since

    def attempt(self, what: str, fn: Callable[..., Any], *args: Any) -> bool:
        try:
            fn(*args)
        except (OSError, RuntimeError) as exc:
            self.refuse(what, exc)
            return False
        if what in self._streak:  # a kind refused before: one dict look-up on the common path
            refused = self._streak.pop(what)
            if what in self._unanswered:
                self._unanswered.discard(what)
                self.echo(f"{self.tag} {what} written again after {refused} refused")
        return True

    def refuse(self, what: str, exc: BaseException) -> None:
        """Count a write of kind ``what`` that ``exc`` refused; said when it is the kind's first, or its last said is
        ``SAY_EVERY_S`` old (a write that fails and lands by turns is said so too, not at every turn)."""
        self.counts[what] += 1
        self._streak[what] = self._streak.get(what, 0) + 1
        now = self.clock()
        if what in self._said_at and now - self._said_at[what] < SAY_EVERY_S:
            return
        self._said_at[what] = now
        self._unanswered.add(what)
        self.echo(
            f"{self.tag} {what} not written ({type(exc).__name__}: {exc}; {self.counts[what]} refused so far); {self.going_on}"
        )


class InPlaceRecord:
    """A small text record rewritten in place: each ``write`` is one ``os.pwrite`` of the whole record, padded with
    spaces to ``width`` bytes, at offset 0. The first write makes the file (while there is room); later ones land in
    the blocks it already holds, so a full disk does not refuse them (a copy-on-write filesystem still may). A reader
    may meet a write half done (one page: rare); ``read_record`` strips the padding."""

    def __init__(self, path: str, width: int, sync: bool = False):
        """``sync``: fsync each write (a record a restart reads); ``width`` grows to a longer record or file met."""
        if width < 1:
            raise ValueError(f"width={width} must be >= 1 byte")
        self.path, self.width, self.sync = path, width, sync

    def write(self, text: str) -> None:
        data = text.encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            # never shorter than the file: a longer record before (or a file of another writer) leaves no tail behind
            self.width = max(self.width, len(data), os.fstat(fd).st_size)
            written = os.pwrite(fd, data.ljust(self.width), 0)
            if written != self.width:  # only a file that grew can be cut short
                raise OSError(errno.ENOSPC, f"{written} of {self.width} bytes of {self.path} written")
            if self.sync:
                os.fsync(fd)
        finally:
            os.close(fd)


def read_record(path: str) -> str:
    """The text of ``path`` without the padding ``InPlaceRecord`` adds (nor zeros a crash may leave at its end); a file
    written whole (an older release's) reads the same."""
    with open(path, "rb") as fh:
        return fh.read().strip(b" \t\r\n\0").decode()


def write_atomic(path: str, text: str, tmp: str = "") -> None:
    """``text`` into ``path``: written whole to ``tmp`` (default: ``path`` + .tmp), then renamed into place; a failed
    write removes its ``tmp`` (a full disk gets its blocks back)."""
    tmp = tmp or path + ".tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
