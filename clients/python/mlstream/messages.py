"""Typed messages of the WebSocket feed ``/v1/ws``.

:func:`parse` turns one decoded JSON message into an instance of the class
of its ``type``. Every message keeps the whole decoded object in ``raw``, so
fields the server adds later are not lost.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional


@dataclass
class Message:
    """A message of a type this client does not know (yet)."""

    type: str
    job: str
    raw: Dict[str, Any] = field(repr=False, default_factory=dict)


@dataclass
class Prediction(Message):
    """The prediction of one event, made before the event was learned
    (progressive validation): ``p`` is the probability of label 1, ``label``
    the event's label (``None`` for a predict-only event)."""

    key: str = ""
    p: float = 0.0
    label: Optional[int] = None
    model_version: int = 0
    ts: int = 0
    seq: int = 0


@dataclass
class Stats(Message):
    """A job's status, as ``GET /v1/jobs/{job}``, every second; ``dropped``
    counts the messages this connection lost because it fell behind."""

    ts: int = 0
    dropped: int = 0
    stats: Dict[str, Any] = field(default_factory=dict)


@dataclass
class Backup(Message):
    """A state backup of fault tolerance was written."""

    ts: int = 0
    index: int = 0
    full: bool = False
    bytes: int = 0
    divergence: float = 0.0
    last_seqs: List[int] = field(default_factory=list)
    partitions: List[int] = field(default_factory=list)
    partition: Optional[int] = None


@dataclass
class Recovery(Message):
    """How the job recovered after a restart (lost events, bound, within)."""

    ts: int = 0
    recovery: Dict[str, Any] = field(default_factory=dict)


@dataclass
class TopK(Message):
    """A heavy-hitters job's top k changed."""

    ts: int = 0
    topk: Dict[str, Any] = field(default_factory=dict)


@dataclass
class Distinct(Message):
    """A distinct job's count changed."""

    ts: int = 0
    distinct: Dict[str, Any] = field(default_factory=dict)


@dataclass
class Match(Message):
    """A join emitted one match (``key``, ``left_ts``, ``right_ts``, values)."""

    match: Dict[str, Any] = field(default_factory=dict)


@dataclass
class Join(Message):
    """A join's running statistics and estimates."""

    ts: int = 0
    join: Dict[str, Any] = field(default_factory=dict)


TYPES = {
    "prediction": Prediction,
    "stats": Stats,
    "backup": Backup,
    "recovery": Recovery,
    "topk": TopK,
    "distinct": Distinct,
    "match": Match,
    "join": Join,
}


def parse(obj: Dict[str, Any]) -> Message:
    """The typed message of a decoded feed message."""
    typ = str(obj.get("type", ""))
    cls = TYPES.get(typ, Message)
    known = {f.name for f in dataclasses.fields(cls)} - {"type", "job", "raw"}
    kwargs = {k: v for k, v in obj.items() if k in known}
    return cls(type=typ, job=str(obj.get("job", "")), raw=obj, **kwargs)
