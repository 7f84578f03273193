"""HTTP and WebSocket client of an mlstream service.

The HTTP side uses the standard library only (one keep-alive connection per
thread); the WebSocket feed uses ``websockets``. Calls follow River's naming
(``learn_one``, ``predict_proba_one``, ``learn_many``) so that code written for
an in-process River model moves to a served one with few changes.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import math
import os
import pathlib
import ssl
import threading
import time
import urllib.parse
from collections import deque
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

from . import messages
from .errors import (
    APIError,
    MlstreamError,
    PayloadTooLarge,
    TooManyRequests,
    api_error,
)

DEFAULT_URL = "http://127.0.0.1:8080"
NDJSON = "application/x-ndjson"
JSON = "application/json"

Features = Dict[str, Any]
RetryHook = Callable[[TooManyRequests, float], None]


class Client:
    """A connection to one mlstream service.

    ``url`` defaults to ``$MLSTREAM_URL``, then ``http://127.0.0.1:8080``;
    ``token`` (sent as ``Authorization: Bearer``) to ``$MLSTREAM_TOKEN``.
    ``batch_size`` is the number of events per request in ``learn_many`` and
    ``predict_proba_many``; ``retry_timeout`` is how long one batch may keep
    being refused with 429 before the 429 is raised; ``on_retry(error,
    delay)`` is called before each wait after a 429.
    """

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None, *, timeout: float = 30.0,
                 batch_size: int = 1000, retry_timeout: float = 60.0, on_retry: Optional[RetryHook] = None):
        url = url or os.environ.get("MLSTREAM_URL") or DEFAULT_URL
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"url must be http(s)://host[:port], got {url!r}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self.url = url.rstrip("/")
        self.token = token if token is not None else os.environ.get("MLSTREAM_TOKEN") or None
        self.timeout = timeout
        self.batch_size = batch_size
        self.retry_timeout = retry_timeout
        self.on_retry = on_retry
        self._parts = parts
        self._base_path = parts.path.rstrip("/")
        self._local = threading.local()
        # Every thread's connection, so that close() reaches them all.
        self._conns: set = set()
        self._conns_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Client({self.url!r})"

    # --- HTTP -------------------------------------------------------------

    def request(self, method: str, path: str, body: Optional[bytes] = None, *, content_type: Optional[str] = None,
                query: Optional[Dict[str, Any]] = None, raw: bool = False) -> Any:
        """One request; the decoded JSON answer (the body's bytes with
        ``raw``), or an :class:`APIError`."""
        target = self._base_path + path
        if query:
            q = {k: v for k, v in query.items() if v is not None}
            if q:
                target += "?" + urllib.parse.urlencode(q)
        headers = {"Accept": JSON}
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        if body is not None:
            headers["Content-Type"] = content_type or JSON
        status, resp_headers, data = self._roundtrip(method, target, body, headers)
        decoded = _decode(data)
        if status >= 400:
            raise api_error(status, decoded if isinstance(decoded, dict) else None,
                            retry_after_header=resp_headers.get("Retry-After"), method=method, path=path,
                            text=data.decode("utf-8", "replace")[:200])
        return data if raw else decoded

    def _roundtrip(self, method: str, target: str, body: Optional[bytes], headers: Dict[str, str]):
        # A kept-alive connection the server has closed fails on first use;
        # the request never reached the server, so it is sent again once.
        for attempt in (0, 1):
            conn, reused = self._connection()
            try:
                conn.request(method, target, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self._drop_connection()
                if reused and attempt == 0:
                    continue
                raise
            except BaseException:
                self._drop_connection()
                raise
            if resp.will_close:
                self._drop_connection()
            return resp.status, resp.headers, data
        raise AssertionError("unreachable")

    def _connection(self) -> Tuple[http.client.HTTPConnection, bool]:
        conn = getattr(self._local, "conn", None)
        if conn is not None and conn.sock is not None:
            return conn, True
        host, port = self._parts.hostname, self._parts.port
        if self._parts.scheme == "https":
            conn = http.client.HTTPSConnection(host, port, timeout=self.timeout, context=ssl.create_default_context())
        else:
            conn = http.client.HTTPConnection(host, port, timeout=self.timeout)
        self._local.conn = conn
        with self._conns_lock:
            self._conns.add(conn)
        return conn, False

    def _drop_connection(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            with self._conns_lock:
                self._conns.discard(conn)
            conn.close()

    def close(self) -> None:
        """Closes the kept-alive connections of every thread (a later call
        opens a new one)."""
        with self._conns_lock:
            conns, self._conns = self._conns, set()
        for conn in conns:
            conn.close()
        self._local.conn = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # --- service and jobs --------------------------------------------------

    def health(self) -> bool:
        """Whether ``/readyz`` answers ready (recovery is over)."""
        try:
            return self.request("GET", "/readyz").get("status") == "ready"
        except APIError:
            return False

    def jobs(self) -> List[Dict[str, Any]]:
        """The status of every job."""
        return self.request("GET", "/v1/jobs")["jobs"]

    def job(self, name: str, *, input: Optional[str] = None) -> "Job":
        """The job ``name`` (no request is made until it is used). Pass its
        ``input`` stream to learn with a token of the ingest scope only
        (reading the spec needs the read scope)."""
        return Job(self, name, input=input)

    def create_job(self, spec: Union[Dict[str, Any], str, pathlib.Path], name: Optional[str] = None) -> "Job":
        """Declares a job from a dict, a JSON or YAML text, or a file path.

        The name comes from ``name`` or the spec's ``name``. An identical job
        that runs already is kept (the server answers 200); a different one
        under the same name raises :class:`Conflict`. YAML needs PyYAML
        (Debian: python3-yaml).
        """
        spec = dict(_load_spec(spec))
        if "jobs" in spec:
            raise ValueError("create_job takes one job spec, not a config file's {jobs: [...]}: pass each job")
        name = name or spec.get("name")
        if not name:
            raise ValueError("the job needs a name: pass name=... or put 'name' in the spec")
        spec.setdefault("name", name)
        status = self.request("PUT", "/v1/jobs/" + _seg(name), _json(spec), content_type=JSON)
        job = Job(self, name)
        job._status = status
        return job

    def delete_job(self, name: str) -> None:
        """Removes the job after it has processed what is queued."""
        self.request("DELETE", "/v1/jobs/" + _seg(name))

    # --- events ------------------------------------------------------------

    def post_events(self, stream: str, events: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
        """Posts events in one request, accepted or refused whole; the 202 body."""
        return self.request("POST", "/v1/streams/" + _seg(stream) + "/events", _ndjson(events), content_type=NDJSON)

    def send(self, stream: str, events: Iterable[Dict[str, Any]], *, batch_size: Optional[int] = None) -> int:
        """Posts events in batches, waiting and retrying on 429 as the server
        asks; a batch over a size limit (413) is halved. Returns how many
        events were accepted.

        A batch that fails otherwise raises its :class:`APIError`, and the
        batches before it stay accepted: ``err.accepted`` counts them, and
        ``err.index`` is the position of the refused event in ``events``
        (0-based; None when the server named no line).
        """
        return self._send("/v1/streams/" + _seg(stream) + "/events", events, batch_size)

    def _send(self, path: str, items: Iterable[Dict[str, Any]], batch_size: Optional[int]) -> int:
        """send's batching, retries and errors for any route that takes
        NDJSON and answers {"accepted": n}."""
        accepted = [0]
        try:
            for batch in _chunks(items, batch_size or self.batch_size):
                self._send_batch(path, batch, accepted)
        except APIError as err:
            err.accepted = accepted[0]
            err.index = accepted[0] + err.line - 1 if err.line else None
            raise
        return accepted[0]

    def _send_batch(self, path: str, batch: List[Dict[str, Any]], accepted: List[int]) -> None:
        try:
            accepted[0] += self._post_retrying(path, batch)["accepted"]
        except PayloadTooLarge:
            if len(batch) < 2:
                raise
            half = len(batch) // 2
            self._send_batch(path, batch[:half], accepted)
            self._send_batch(path, batch[half:], accepted)

    def _post_retrying(self, path: str, batch: List[Dict[str, Any]]) -> Dict[str, Any]:
        deadline = time.monotonic() + self.retry_timeout
        while True:
            try:
                return self.request("POST", path, _ndjson(batch), content_type=NDJSON)
            except TooManyRequests as err:
                delay = max(err.retry_after, 0.01)
                if time.monotonic() + delay > deadline:
                    raise
                if self.on_retry is not None:
                    self.on_retry(err, delay)
                time.sleep(delay)

    # --- WebSocket ---------------------------------------------------------

    def subscribe(self, jobs: Optional[Sequence[str]] = None, types: Optional[Sequence[str]] = None, *,
                  timeout: Optional[float] = None) -> "Subscription":
        """The WebSocket feed of ``jobs`` (all when None) and ``types`` (all
        when None) as an iterator of typed messages (see ``messages``).

        With jobs named, the call returns once the server has subscribed
        this connection, so no message published afterwards is missed.
        ``timeout`` bounds the wait for each message (``TimeoutError``).
        """
        return Subscription(self, list(jobs or []), list(types or []), timeout=timeout)

    def _ws_url(self, query: Dict[str, str]) -> str:
        scheme = "wss" if self._parts.scheme == "https" else "ws"
        q = urllib.parse.urlencode({k: v for k, v in query.items() if v})
        return f"{scheme}://{self._parts.netloc}{self._base_path}/v1/ws" + (f"?{q}" if q else "")


class Job:
    """One job of the service, with River's and scikit-learn's manners."""

    def __init__(self, client: Client, name: str, *, input: Optional[str] = None):
        self.client = client
        self.name = name
        self._input = input
        self._status: Optional[Dict[str, Any]] = None

    def __repr__(self) -> str:
        return f"Job({self.name!r})"

    def _path(self, suffix: str = "") -> str:
        return "/v1/jobs/" + _seg(self.name) + suffix

    # --- state -------------------------------------------------------------

    def status(self) -> Dict[str, Any]:
        """``GET /v1/jobs/{job}``: rates, queues, latency, model, metrics."""
        self._status = self.client.request("GET", self._path())
        return self._status

    @property
    def spec(self) -> Dict[str, Any]:
        """The job's spec with the server's defaults filled in."""
        if self._status is None:
            self.status()
        return self._status["spec"]

    @property
    def input(self) -> str:
        """The stream the job reads (``learn_*`` post there)."""
        stream = self._input or self.spec.get("input")
        if not stream:
            raise MlstreamError(f"job {self.name!r} of kind {self.spec.get('kind')!r} reads no single input stream "
                                f"(a join reads 'left' and 'right'): post with client.send(stream, events)")
        return stream

    def pause(self) -> None:
        """Holds the job's partitions: events queue, then ingest answers 429 (admin)."""
        self.client.request("POST", self._path("/pause"))

    def resume(self) -> None:
        """Lets a paused job process again (admin)."""
        self.client.request("POST", self._path("/resume"))

    def rescale(self, partitions: int) -> Dict[str, Any]:
        """``PATCH /v1/jobs/{job}``: changes the running job's partition count
        (admin); its state moves by key. Returns the status, whose
        ``elastic`` section lists the rescale (single-node mode only)."""
        self._status = self.client.request("PATCH", self._path(), _json({"partitions": int(partitions)}), content_type=JSON)
        return self._status

    def delete(self) -> None:
        self.client.delete_job(self.name)

    def wait_processed(self, n: int, timeout: float = 60.0) -> Dict[str, Any]:
        """Waits until the job has processed (or shed) ``n`` events in all; the status."""
        return _poll(self.status, lambda st: _done(st) >= n, timeout,
                     lambda st: f"job {self.name!r} processed {_done(st)} of {n} events")

    # --- learning and predicting --------------------------------------------

    def learn_one(self, x: Features, y: Any, *, key: Any = None, ts: Any = None) -> None:
        """Posts one labelled event, learned after it is predicted (progressive
        validation); waits and retries on 429 as ``learn_many`` does."""
        self.client.send(self.input, [_event(x, y, key, ts)])

    def learn_many(self, X: Any, y: Any = None, *, keys: Optional[Sequence[Any]] = None,
                   batch_size: Optional[int] = None) -> int:
        """Posts many labelled events in batches, retrying on 429; returns the number accepted.

        ``X`` is a list of feature dicts or a pandas DataFrame (NaN cells are
        left out), with labels ``y`` (a list or Series); or, with ``y``
        None, an iterable of ``(x, y)`` pairs.
        """
        keys_it = iter(keys) if keys is not None else None
        events = (_event(x, lab, next(keys_it) if keys_it else None) for x, lab in _pairs(X, y))
        return self.client.send(self.input, events, batch_size=batch_size)

    def predict_proba_one(self, x: Features, *, key: Any = None, id: Any = None) -> Dict[bool, float]:
        """``{False: 1 - p, True: p}`` from the global model (``[1]`` works too).

        With ``id``, the job holds this prediction for a delayed label
        (``label(id, y)``): it learns from ``x`` when the label comes and
        scores this ``p`` in its metrics. Holding needs the ingest scope."""
        return _proba(self._predict([_event(x, None, key, id=id)])[0]["p"])

    def predict_one(self, x: Features, *, key: Any = None, id: Any = None) -> bool:
        """The more likely label."""
        return self.predict_proba_one(x, key=key, id=id)[True] >= 0.5

    def predict_proba_many(self, X: Any, *, ids: Optional[Sequence[Any]] = None) -> Any:
        """Probabilities of many rows: a list of ``{False, True}`` dicts, or a
        DataFrame with columns False and True when ``X`` is a DataFrame.
        ``ids``, one per row, hold the predictions for delayed labels."""
        rows = _rows(X)
        ids_it = iter(ids) if ids is not None else None
        ps: List[float] = []
        events = (_event(x, None, id=next(ids_it) if ids_it else None) for x in rows)
        for batch in _chunks(events, self.client.batch_size):
            ps.extend(p["p"] for p in self._predict(batch))
        if _is_dataframe(X):
            import pandas as pd  # present: X is a DataFrame
            return pd.DataFrame({False: [1 - p for p in ps], True: ps}, index=X.index)
        return [_proba(p) for p in ps]

    def predict_many(self, X: Any) -> List[bool]:
        proba = self.predict_proba_many(X)
        if _is_dataframe(X):
            return proba[True] >= 0.5
        return [p[True] >= 0.5 for p in proba]

    def _predict(self, events: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
        return self.client.request("POST", self._path("/predict"), _ndjson(events), content_type=NDJSON)["predictions"]

    def explain_one(self, x: Features, *, key: Any = None) -> Dict[str, Any]:
        """The prediction of ``x`` taken apart (as VW's --audit): ``p``,
        ``margin``, ``bias`` and per feature its ``name``, ``slot``,
        ``value``, ``weight``, ``contribution`` and ``collides_with``."""
        body = _ndjson([_event(x, None, key)])
        return self.client.request("POST", self._path("/explain"), body, content_type=NDJSON)["explanations"][0]

    def top_weights(self, n: int = 20) -> List[Dict[str, Any]]:
        """The ``n`` strongest weights by the feature names seen at their
        slots: ``slot``, ``weight``, ``sign``, ``names`` (``name``, sampled
        ``count``) and ``collision``."""
        return self.client.request("GET", self._path("/model"), query={"top": n})["top"]

    def label(self, id: Any, y: Any, *, ts: Any = None) -> None:
        """A delayed label for the prediction held under ``id`` (an
        unlabelled event or a prediction made with that id): the job learns
        from the held features and scores the probability it served.
        Retries on 429 as ``learn_many`` does. The server counts how each
        label fared (``job.labels()``): a 202 only means it was queued."""
        self.label_many([(id, y)], ts=ts)

    def label_many(self, pairs: Iterable[Tuple[Any, Any]], *, ts: Any = None, batch_size: Optional[int] = None) -> int:
        """Many delayed labels, ``(id, y)`` pairs, in batches; returns how many were accepted."""
        items = ({"id": i, "label": _label(y), **({"ts": ts} if ts is not None else {})} for i, y in pairs)
        return self.client._send(self._path("/labels"), items, batch_size)

    def labels(self) -> Dict[str, Any]:
        """The job's delayed-label counts: ``pending``, ``held``, ``joined``,
        ``unknown``, ``expired``, ``evicted``, ``duplicates``, ``ttl_ms``..."""
        st = self.status()
        if "labels" not in st:
            raise MlstreamError(f"job {self.name!r} of kind {st.get('kind')!r} takes no delayed labels (only logreg does)")
        return st["labels"]

    def export_model(self, path: Union[str, pathlib.Path], format: str = "binary") -> int:
        """Writes the job's model to ``path``: the binary export (for
        ``import_model`` and ``mlstream model inspect``), or with
        ``format="json"`` its readable form. Returns the bytes written."""
        data = self.client.request("GET", self._path("/model/export"), query={"format": format}, raw=True)
        pathlib.Path(path).write_bytes(data)
        return len(data)

    def import_model(self, path: Union[str, pathlib.Path]) -> Dict[str, Any]:
        """Seeds the job with a binary export (admin token): it goes on
        learning from that model. A model of other learner parameters (or
        not a model) raises an :class:`APIError` whose ``field`` names the
        mismatch. Returns the job's status."""
        return self.client.request("PUT", self._path("/model"), pathlib.Path(path).read_bytes(),
                                   content_type="application/octet-stream")

    # --- queries -----------------------------------------------------------

    def metrics(self) -> Dict[str, Dict[str, float]]:
        """Progressive metrics of a logreg job: ``{"all": {...}, "recent": {...}}``
        with count, positives, accuracy, log_loss and auc."""
        st = self.status()
        if "metrics" not in st:
            raise MlstreamError(f"job {self.name!r} of kind {st.get('kind')!r} has no metrics (only logreg has)")
        return st["metrics"]

    def model(self, weights: bool = False, limit: Optional[int] = None, offset: Optional[int] = None) -> Dict[str, Any]:
        """The model's version, non-zero weights, metrics, and a page of the largest weights."""
        return self.client.request("GET", self._path("/model"),
                                   query={"weights": "true" if weights else None, "limit": limit, "offset": offset})

    def topk(self, k: Optional[int] = None, window: str = "current") -> Dict[str, Any]:
        """A heavy-hitters job's top ``k`` items with bounds (window: current, last, all)."""
        return self.client.request("GET", self._path("/topk"), query={"k": k, "window": window})

    def distinct(self, window: str = "current") -> Dict[str, Any]:
        """A distinct job's estimate with its bounds (window: current, last, all)."""
        return self.client.request("GET", self._path("/distinct"), query={"window": window})

    def matches(self, limit: Optional[int] = None, window: str = "current") -> Dict[str, Any]:
        """A join's counters, estimates and ``limit`` recent matches."""
        return self.client.request("GET", self._path("/matches"), query={"limit": limit, "window": window})

    def subscribe(self, *types: str, timeout: Optional[float] = None) -> "Subscription":
        """This job's feed of ``types`` (all when none), e.g. ``job.subscribe("prediction")``."""
        return self.client.subscribe([self.name], list(types), timeout=timeout)


class Subscription:
    """An open WebSocket feed; iterate it for typed messages, close it (or use
    ``with``) when done. Messages are read while iterating: a consumer that
    stops for long falls behind, and the server drops what it cannot hold
    (counted in ``Stats.dropped``), then closes a connection that stays behind."""

    def __init__(self, client: Client, jobs: List[str], types: List[str], *, timeout: Optional[float] = None):
        for t in types:
            if t not in messages.TYPES:
                raise ValueError(f"unknown message type {t!r}; known: {', '.join(messages.TYPES)}")
        self.timeout = timeout
        self._want = set(types) or None
        # The server sends stats right after it subscribed the connection:
        # waiting for them makes "returned" mean "live" (jobs named only:
        # with none, there may be no job to send stats of).
        wait_live = bool(jobs)
        ask = list(types)
        if wait_live and types and "stats" not in types:
            ask.append("stats")
        self._pending: deque = deque()
        self._loop = asyncio.new_event_loop()
        url = client._ws_url({"jobs": ",".join(jobs), "types": ",".join(ask)})
        try:
            self._ws = self._run(_ws_connect(url, client.token, client.timeout, client._parts.scheme == "https"))
            if wait_live:
                self._wait_live(client.timeout)
        except BaseException:
            self._loop.close()
            raise

    def _run(self, coro: Any) -> Any:
        return self._loop.run_until_complete(coro)

    def _wait_live(self, timeout: float) -> None:
        try:
            first = self._receive(timeout)
        except StopIteration:
            raise MlstreamError("the feed closed before its first message") from None
        if self._wanted(first):
            self._pending.append(first)

    def _receive(self, timeout: Optional[float]) -> messages.Message:
        import websockets

        try:
            raw = self._run(asyncio.wait_for(self._ws.recv(), timeout))
        except websockets.exceptions.ConnectionClosedOK:
            raise StopIteration
        except websockets.exceptions.ConnectionClosedError as err:
            raise MlstreamError(f"the feed closed: {err}") from err
        return messages.parse(json.loads(raw))

    def _wanted(self, msg: messages.Message) -> bool:
        return self._want is None or msg.type in self._want

    def __iter__(self) -> Iterator[messages.Message]:
        """Reads the feed until it ends. A loop over it that stops early
        (break, return, an exception) closes the feed, as leaving a ``with``
        block does: nothing is left pending at exit. ``next(feed)`` reads one
        message without that."""
        finished = False
        try:
            while True:
                try:
                    msg = next(self)
                except StopIteration:
                    finished = True
                    return
                yield msg
        finally:
            if not finished:
                self.close()

    def __next__(self) -> messages.Message:
        if self._loop.is_closed():
            raise StopIteration
        while True:
            if self._pending:
                return self._pending.popleft()
            msg = self._receive(self.timeout)
            if self._wanted(msg):
                return msg

    def close(self) -> None:
        """Closes the connection and ends the tasks it runs, so that none is
        left pending when the event loop closes."""
        if self._loop.is_closed():
            return
        try:
            self._run(self._ws.close())
        finally:
            try:
                self._run(_cancel_all(asyncio.all_tasks(self._loop)))
                self._run(self._loop.shutdown_asyncgens())
            finally:
                self._loop.close()

    def __enter__(self) -> "Subscription":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


async def _cancel_all(tasks: Any) -> None:
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _ws_connect(url: str, token: Optional[str], timeout: float, tls: bool) -> Any:
    import websockets

    # The token goes in a subprotocol, as the browser dashboard sends it:
    # it works on every websockets version (the header argument was renamed).
    protocols = ["mlstream"] + (["bearer." + token] if token else [])
    try:
        return await asyncio.wait_for(websockets.connect(
            url, subprotocols=protocols, max_size=1 << 24, ping_interval=None,
            ssl=ssl.create_default_context() if tls else None), timeout)
    except Exception as err:
        status, body = _handshake_status(err)
        if status is None:
            raise
        raise api_error(status, body, method="GET", path="/v1/ws") from err


def _handshake_status(err: Exception) -> Tuple[Optional[int], Optional[dict]]:
    """The HTTP status (and JSON body, when known) of a refused handshake,
    across websockets versions (InvalidStatusCode before 14, InvalidStatus after)."""
    status = getattr(err, "status_code", None)
    body = None
    response = getattr(err, "response", None)
    if response is not None:
        status = getattr(response, "status_code", status)
        decoded = _decode(getattr(response, "body", b"") or b"")
        body = decoded if isinstance(decoded, dict) else None
    return status, body


# --- helpers ---------------------------------------------------------------


def _seg(s: str) -> str:
    return urllib.parse.quote(str(s), safe="")


def _json_default(v: Any) -> Any:
    # numpy and pandas scalars have .item(); everything else is an error.
    if hasattr(v, "item"):
        return v.item()
    raise TypeError(f"cannot send {type(v).__name__} {v!r} as JSON")


def _json(v: Any) -> bytes:
    return json.dumps(v, default=_json_default, allow_nan=False, separators=(",", ":")).encode()


def _ndjson(events: Iterable[Dict[str, Any]]) -> bytes:
    return b"\n".join(_json(e) for e in events) + b"\n"


def _decode(data: bytes) -> Any:
    if not data:
        return {}
    try:
        return json.loads(data)
    except ValueError:
        return None


def _load_spec(spec: Union[Dict[str, Any], str, pathlib.Path]) -> Dict[str, Any]:
    if isinstance(spec, dict):
        return spec
    if isinstance(spec, pathlib.Path):
        spec = spec.read_text()
    try:
        out = json.loads(spec)
    except ValueError:
        try:
            import yaml
        except ImportError as err:
            raise ImportError("a YAML job spec needs PyYAML (Debian: apt-get install python3-yaml); "
                              "or pass a dict or JSON") from err
        out = yaml.safe_load(spec)
    if not isinstance(out, dict):
        raise ValueError(f"a job spec is a mapping, got {type(out).__name__}")
    return out


def _label(y: Any) -> Any:
    if isinstance(y, bool) or y is None:
        return y
    if hasattr(y, "item"):
        y = y.item()
    if isinstance(y, float) and y in (0.0, 1.0):
        return int(y)
    return y


def _event(x: Features, y: Any, key: Any = None, ts: Any = None, *, id: Any = None) -> Dict[str, Any]:
    ev: Dict[str, Any] = {}
    if key is not None:
        ev["key"] = key
    if id is not None:
        ev["id"] = id
    if ts is not None:
        ev["ts"] = ts
    if y is not None:
        ev["label"] = _label(y)
    ev["features"] = x
    return ev


def _proba(p: float) -> Dict[bool, float]:
    return {False: 1.0 - p, True: p}


def _is_dataframe(X: Any) -> bool:
    return type(X).__module__.split(".")[0] == "pandas" and hasattr(X, "to_dict") and hasattr(X, "columns")


def _rows(X: Any) -> Iterable[Features]:
    if _is_dataframe(X):
        # A missing cell is a missing feature, as in River.
        return ({k: v for k, v in row.items() if not _missing(v)} for row in X.to_dict("records"))
    return X


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _pairs(X: Any, y: Any) -> Iterable[Tuple[Features, Any]]:
    if y is not None:
        return zip(_rows(X), y)
    if _is_dataframe(X):
        raise ValueError("learn_many(X, y): a DataFrame needs its labels y")
    return X


def _chunks(items: Iterable[Any], size: int) -> Iterator[List[Any]]:
    batch: List[Any] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def _done(status: Dict[str, Any]) -> int:
    """Events a job is finished with: processed, or shed by load shedding."""
    return int(status.get("processed", 0)) + int((status.get("shed") or {}).get("shed", 0))


def _poll(read: Callable[[], Any], ok: Callable[[Any], bool], timeout: float, describe: Callable[[Any], str]) -> Any:
    """Reads until ok, backing off from 5 ms to 200 ms; TimeoutError after timeout."""
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        value = read()
        if ok(value):
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"after {timeout:g} s: {describe(value)}")
        time.sleep(delay)
        delay = min(delay * 2, 0.2)
