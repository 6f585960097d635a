"""The actor slots as the launcher sees them: each slot's sender, the weights it plays, how far behind they are."""

from __future__ import annotations

from typing import Any


class SlotView:
    """Read-only figures per actor slot, from the consolidator's tracks and the learner's counters."""

    def __init__(self, consolidator: Any, counters: Any):
        self.consolidator, self.counters = consolidator, counters

    def weights_versions(self) -> list[int]:
        """The weights_version of each slot's latest accepted batch (-1: nothing heard yet)."""
        return [t.weights_version if t.stats else -1 for t in self.consolidator.tracks]

    def newest_version(self) -> int:
        """The newest weights version of this run any slot's latest accepted batch was played with (-1: none)."""
        run = self.counters.run
        return max((t.weights_version for t in self.consolidator.tracks if t.stats and t.run == run), default=-1)

    def weights_lag(self) -> list[int]:
        """Versions each slot is behind the current weights (-1: nothing heard, another run's weights, or lease lapsed)."""
        c, held = self.counters, self.consolidator.slots.held()
        return [
            c.weights_version - t.weights_version if t.stats and t.run == c.run and live else -1
            for t, live in zip(self.consolidator.tracks, held)
        ]

    def incarnations(self) -> list[int]:
        """The incarnation whose batches each slot accepts (-1: none yet)."""
        return [t.incarnation for t in self.consolidator.tracks]

    def any_on_other_run(self) -> bool:
        """Whether some slot's latest batch was played with another run's weights (it missed this run's broadcast)."""
        held = self.consolidator.slots.held()  # a lapsed slot's last batch calls for nothing: its actor is gone
        return any(t.stats and t.run != self.counters.run and live for t, live in zip(self.consolidator.tracks, held))

    def release(self, slot: int) -> None:
        """Free ``slot``'s lease (its actor died) so the restarted actor takes it at once."""
        self.consolidator.slots.release(slot)
