"""A batch size that follows a deadline's slack."""

from __future__ import annotations

from collections import deque

from ._sizes import byte_size


class BatchSizeController:
    """R3's idea: a training step's time grows with its batch, so grow the
    batch while steps finish early and shrink it when they run late, so
    that the step meets its deadline on whatever the machine has left.

    ``update(slack, deadline, ran=True)`` takes a step's slack (``ctx.slack``
    read at the end of the reaction: ns before its deadline, negative when
    late), its deadline (``ctx.deadline``), and whether the step ran (False
    from the deadline handler, which ran instead), and returns the next
    batch size. Each step that ran gives a cost per sample (its time over
    its size); the size is the one whose *worst* cost of the last
    ``window`` steps would use ``target`` of the deadline:

    - late (slack < 0): at most the size times ``shrink`` (a miss costs at
      once), and the miss's cost is remembered;
    - otherwise: that size, growing by at most ``grow`` a step (so one lucky
      step cannot blow it up) and shrinking by at most ``shrink``.

    Why the worst of a window and not the last step: on a loaded machine a
    step's time per sample varies by tens of percent from one step to the
    next (another process takes the CPU for a while). Sized from the last
    step alone, the batch grew back to the edge after every slow step, and
    the next slow one missed (1-3% of steps, two CPU hogs beside the
    learner); sized from the worst recent one, the margin covers the
    variation the machine has shown lately; the price is that one slow step
    (the first ones after start included) holds the batch down for a
    window. A step the deadline handler replaced gives no cost (its size
    did not run): it counts as a miss (its slack is negative) and leaves
    the size unchanged.

    Invariant: ``minimum <= size <= maximum``, and with ``memory`` and
    ``bytes_per_sample`` given, ``size * bytes_per_sample <= memory`` (the
    minimum wins if they conflict). ``misses`` and ``steps`` count what it saw.
    """

    def __init__(
        self,
        initial: int,
        minimum: int = 1,
        maximum: int | None = None,
        memory: int | str | None = None,
        bytes_per_sample: int | None = None,
        target: float = 0.7,
        grow: float = 1.25,
        shrink: float = 0.5,
        window: int = 32,
    ) -> None:
        if not 0 < target < 1 or grow < 1 or not 0 < shrink < 1:
            raise ValueError(f"BatchSizeController: need 0 < target < 1, grow >= 1 and 0 < shrink < 1; got target={target}, grow={grow}, shrink={shrink}")
        if window < 1:
            raise ValueError(f"BatchSizeController: window {window} must be at least 1 step")
        if minimum < 1:
            raise ValueError(f"BatchSizeController: minimum {minimum} must be at least 1")
        cap = maximum
        if memory is not None:
            if not bytes_per_sample:
                raise ValueError("BatchSizeController: memory needs bytes_per_sample (what one sample of the batch takes)")
            by_memory = byte_size(memory, "BatchSizeController memory") // bytes_per_sample
            cap = by_memory if cap is None else min(cap, by_memory)
        self.minimum = minimum
        self.maximum = cap
        self.target, self.grow, self.shrink = target, grow, shrink
        self.size = self._bound(initial)
        self.misses = 0
        self.steps = 0
        # Cost per sample (ns) of the last `window` steps that ran.
        self._costs: deque[float] = deque(maxlen=window)

    def _bound(self, size: float) -> int:
        s = int(size)
        if self.maximum is not None:
            s = min(s, self.maximum)
        return max(self.minimum, s)

    def update(self, slack: int, deadline: int, ran: bool = True) -> int:
        """The next batch size after a step with this slack and deadline
        (ns); ``ran=False`` for a step its deadline handler replaced."""
        self.steps += 1
        late = slack < 0
        if late:
            self.misses += 1
        if not ran:
            return self.size
        self._costs.append(max(deadline - slack, 1) / self.size)
        fit = self.target * deadline / max(self._costs)
        if late:
            self.size = self._bound(min(self.size * self.shrink, fit))
        else:
            self.size = self._bound(max(min(fit, self.size * self.grow), self.size * self.shrink))
        return self.size
