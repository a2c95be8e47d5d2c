"""How long the engine last sat idle, and how many steps it has run since the first one after
that wait: a ``StepContext``'s ``idle_s`` and ``since_idle``, which the after-idle effect
reads (``sim.cost.after_idle``). The simulator counts the steps it runs with it, and
fidelity the measured steps it prices, so both charge the same steps."""

from __future__ import annotations


class Waits:
    """Counts waits between steps; a gap of at most ``from_s`` is back to back."""

    def __init__(self, from_s: float = 0.0) -> None:
        self.from_s = from_s
        self.idle_s = 0.0  # the last wait (0 before any)
        self.since_idle = 0  # steps between the first one after it and this one

    def start(self, gap_s: float) -> None:
        """A step starts ``gap_s`` after the last one ended (the first: after the run began)."""
        if gap_s > self.from_s:
            self.idle_s, self.since_idle = gap_s, 0
        else:
            self.since_idle += 1
