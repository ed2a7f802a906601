"""A token bucket, pure over the clock it is given: the report budget (controller/intake.py)
and the books' adoption budget (core/matching.py) both meter with it."""
from __future__ import annotations


class Bucket:
    """A token bucket: `rate` tokens a second, at most `burst` held."""

    __slots__ = ("rate", "burst", "tokens", "at")

    def __init__(self, rate: float, burst: float, now: float) -> None:
        self.rate, self.burst, self.tokens, self.at = rate, burst, burst, now

    def wait(self, amount: float, now: float) -> float:
        """Seconds until `amount` tokens are held (0: they are now; nothing is taken)."""
        self.tokens = min(self.burst, self.tokens + max(now - self.at, 0.0) * self.rate)
        self.at = now
        return max(min(amount, self.burst) - self.tokens, 0.0) / self.rate

    def take(self, amount: float, now: float) -> bool:
        if self.wait(amount, now) > 0:
            return False
        self.tokens -= min(amount, self.burst)
        return True
