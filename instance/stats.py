"""Latency statistics kept by an instance (pure): count, mean, max and percentiles
from a bounded ring of recent samples."""
from __future__ import annotations

RING = 1024


class LatencyStat:
    __slots__ = ("count", "total", "max", "_ring", "_i")

    def __init__(self):
        self.count = 0
        self.total = 0.0
        self.max = 0.0
        self._ring = []
        self._i = 0

    def add(self, secs, n=1):
        """``n`` events that took ``secs`` each (on average)."""
        self.count += n
        self.total += secs * n
        if secs > self.max:
            self.max = secs
        if len(self._ring) < RING:
            self._ring.append(secs)
        else:
            self._ring[self._i] = secs
            self._i = (self._i + 1) % RING

    def add_many(self, samples):
        """One event per sample (seconds each)."""
        self.count += len(samples)
        self.total += sum(samples)
        top = max(samples)
        if top > self.max:
            self.max = top
        ring = self._ring
        room = RING - len(ring)
        if room > 0:
            ring.extend(samples[:room])
            samples = samples[room:]
        if samples:  # overwrite the oldest, in ring order (two slices at most)
            samples = samples[-RING:]
            i, n = self._i, len(samples)
            head = min(n, RING - i)
            ring[i:i + head] = samples[:head]
            ring[:n - head] = samples[head:]
            self._i = (i + n) % RING

    def percentile(self, q):
        if not self._ring:
            return 0.0
        s = sorted(self._ring)
        return s[min(len(s) - 1, int(q * len(s)))]

    def metrics(self, prefix):
        """Flat metrics: ``-count`` and ``-sum-ms`` are counters (windowed means come
        from their differences); ``-p50``, ``-p99``, ``-max`` are recent gauges in ms."""
        return {prefix + "-count": self.count, prefix + "-sum-ms": 1000 * self.total,
                prefix + "-p50": 1000 * self.percentile(0.5), prefix + "-p99": 1000 * self.percentile(0.99),
                prefix + "-max": 1000 * self.max}

    def snapshot(self):
        """Milliseconds, as Heron reports latencies."""
        if not self.count:
            return {"count": 0, "mean": 0.0, "p50": 0.0, "p99": 0.0, "max": 0.0}
        return {"count": self.count, "mean": 1000 * self.total / self.count,
                "p50": 1000 * self.percentile(0.5), "p99": 1000 * self.percentile(0.99),
                "max": 1000 * self.max}
