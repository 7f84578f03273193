"""A Python client of mlstream, with River's manners.

    from mlstream import Client
    job = Client("http://127.0.0.1:8080").job("spam")
    job.learn_one({"words": 120, "links": 7}, 1)
    job.predict_proba_one({"words": 80, "links": 9})   # {False: 0.45, True: 0.55}

HTTP uses the standard library only; the WebSocket feed (``subscribe``)
needs ``websockets``; pandas DataFrames are taken when pandas is installed.
"""

from . import evaluate, messages
from .client import Client, Job, Subscription
from .errors import (
    APIError,
    BadRequest,
    Conflict,
    Forbidden,
    InsufficientStorage,
    MlstreamError,
    NotFound,
    NotSupportedByServer,
    PayloadTooLarge,
    ServiceUnavailable,
    TooManyRequests,
    Unauthorized,
    UnsupportedMediaType,
)

__version__ = "0.1.0"

__all__ = [
    "APIError",
    "BadRequest",
    "Client",
    "Conflict",
    "Forbidden",
    "InsufficientStorage",
    "Job",
    "MlstreamError",
    "NotFound",
    "NotSupportedByServer",
    "PayloadTooLarge",
    "ServiceUnavailable",
    "Subscription",
    "TooManyRequests",
    "Unauthorized",
    "UnsupportedMediaType",
    "evaluate",
    "messages",
]
