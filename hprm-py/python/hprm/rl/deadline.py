"""A batch size that follows a deadline's slack."""

from __future__ import annotations

from ._sizes import byte_size


class BatchSizeController:
    """R3's idea: a training step's time grows with its batch, so grow the
    batch while steps finish early and shrink it when they run late, so
    that the step meets its deadline on whatever the machine has left.

    ``update(slack, deadline)`` takes a step's slack (``ctx.slack`` read at
    the end of the reaction: ns before its deadline, negative when late)
    and its deadline (``ctx.deadline``), and returns the next batch size:

    - late (slack < 0): the size times ``shrink`` (a miss costs at once);
    - otherwise: scaled toward using ``target`` of the deadline, assuming
      the step's time is proportional to its size, by at most ``grow`` a
      step (so one lucky step cannot blow it up).

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
    ) -> None:
        if not 0 < target < 1 or grow < 1 or not 0 < shrink < 1:
            raise ValueError(f"BatchSizeController: need 0 < target < 1, grow >= 1 and 0 < shrink < 1; got target={target}, grow={grow}, shrink={shrink}")
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

    def _bound(self, size: float) -> int:
        s = int(size)
        if self.maximum is not None:
            s = min(s, self.maximum)
        return max(self.minimum, s)

    def update(self, slack: int, deadline: int) -> int:
        """The next batch size after a step with this slack and deadline (ns)."""
        self.steps += 1
        if slack < 0:
            self.misses += 1
            self.size = self._bound(self.size * self.shrink)
            return self.size
        used = max(deadline - slack, 1)
        ratio = min(self.target * deadline / used, self.grow)
        ratio = max(ratio, self.shrink)
        self.size = self._bound(self.size * ratio)
        return self.size
