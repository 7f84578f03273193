"""Progressive validation through a served job, as River's
``evaluate.progressive_val_score``: every labelled event is first predicted,
then learned, and the metrics are the server's own.
"""

from __future__ import annotations

import sys
from typing import Any, Dict, Iterable, Optional, TextIO, Tuple

from .client import Job, _chunks, _done, _poll
from .errors import MlstreamError


def progressive_val_score(dataset: Iterable[Tuple[Dict[str, Any], Any]], job: Job, *, batch_size: Optional[int] = None,
                          print_every: int = 0, timeout: float = 120.0,
                          file: Optional[TextIO] = None) -> Dict[str, float]:
    """Streams ``(x, y)`` pairs through a logreg ``job`` and returns its
    progressive metrics once the server has learned all of them:
    ``{"count", "positives", "accuracy", "log_loss", "auc"}`` over the job's
    whole run (so use a fresh job to score one data set).

    ``print_every=n`` prints the metrics every n events, as River does (it
    waits for the server to catch up each time). ``timeout`` bounds each
    wait, in seconds. Events shed by load shedding are not scored.
    """
    if print_every < 0:
        raise ValueError(f"print_every must be >= 0, got {print_every}")
    size = batch_size or job.client.batch_size
    if print_every:
        size = min(size, print_every)
    start = _scored(job.status())
    sent = 0
    for batch in _chunks(dataset, size):
        before = sent
        sent += job.learn_many(batch, batch_size=size)
        if print_every and sent // print_every > before // print_every:
            _print(sent, _wait_scored(job, start + sent, timeout), file)
    return _wait_scored(job, start + sent, timeout)


def _scored(status: Dict[str, Any]) -> int:
    """Labelled events the job has scored or shed (shed ones are never scored)."""
    if "metrics" not in status:
        raise MlstreamError(f"job {status.get('name')!r} of kind {status.get('kind')!r} has no progressive metrics "
                            f"(only logreg has)")
    return int(status["metrics"]["all"]["count"]) + _done(status) - int(status.get("processed", 0))


def _wait_scored(job: Job, n: int, timeout: float) -> Dict[str, float]:
    # Metrics are published at the end of a group of batches, after
    # `processed` moves: wait on their own count.
    st = _poll(job.status, lambda s: _scored(s) >= n, timeout,
               lambda s: f"job {job.name!r} scored {_scored(s)} of {n} labelled events")
    return st["metrics"]["all"]


def _print(n: int, m: Dict[str, float], file: Optional[TextIO]) -> None:
    print(f"[{n:,}] Accuracy: {m['accuracy']:.2%}, LogLoss: {m['log_loss']:.4f}, ROCAUC: {m['auc']:.4f}",
          file=file or sys.stdout)
