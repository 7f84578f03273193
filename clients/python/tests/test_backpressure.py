"""learn_many waits and retries when the server answers 429."""

from __future__ import annotations

import threading

import pytest

from mlstream import TooManyRequests


def paused_job(client, name):
    # One small queue, held: after a few events every post is refused with
    # 429 until the job resumes.
    job = client.create_job({"name": name, "kind": "logreg", "input": name, "partitions": 1, "queue_size": 4})
    job.pause()
    return job


def test_learn_many_retries_after_429_until_the_queue_drains(make_client, unique):
    seen = []
    refused = threading.Event()

    def on_retry(err, delay):
        seen.append((err, delay))
        refused.set()

    client = make_client("admin", on_retry=on_retry)
    job = paused_job(client, unique)
    admin = make_client("admin")

    def resume_after_a_refusal():
        if refused.wait(60):
            admin.job(unique).resume()

    resumer = threading.Thread(target=resume_after_a_refusal)
    resumer.start()
    rows = [({"a": i}, i % 2) for i in range(40)]
    try:
        assert job.learn_many(rows, batch_size=4) == 40
    finally:
        refused.set()
        resumer.join()
    err, delay = seen[0]
    assert err.status == 429 and "retry" in err.error
    assert err.retry_after > 0 and delay == pytest.approx(max(err.retry_after, 0.01))
    assert err.get("retry_after_ms") > 0
    assert job.wait_processed(40)["processed"] == 40


def test_429_is_raised_once_retry_timeout_is_spent(make_client, unique):
    client = make_client("admin", retry_timeout=0.5)
    job = paused_job(client, unique)
    try:
        with pytest.raises(TooManyRequests) as exc:
            job.learn_many([({"a": i}, 1) for i in range(40)], batch_size=4)
        assert exc.value.retry_after >= 0.05
    finally:
        job.resume()


def test_a_batch_over_the_queues_is_halved(client, unique):
    # 413 "more events than the queues can take": smaller batches go through.
    job = client.create_job({"name": unique, "kind": "logreg", "input": unique, "partitions": 1, "queue_size": 8})
    assert job.learn_many([({"a": i}, 1) for i in range(30)], batch_size=30) == 30
    assert job.wait_processed(30)["processed"] == 30
