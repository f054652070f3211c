#!/usr/bin/env python3
"""Interop helper: drive the official Pulsar client (pulsar-client 3.13, C++ client 4.2) for tests.

Run by tests/support/src/broker.rs (module `official`) with the test venv's python:

    python official.py produce < request.json
    python official.py consume < request.json

The request is one JSON object on stdin; the answer is one JSON object on stdout. Payloads are
base64 both ways. Anything the C++ client prints goes to stderr (stdout is reserved for the answer).
On failure the script prints the error to stderr and exits non-zero.

produce request:
    {"url": "pulsar://127.0.0.1:PORT", "topic": "...", "batching": false,
     "compression": "none|lz4|zlib|zstd|snappy", "operation_timeout_secs": 10,
     "producer_name": null,
     "messages": [{"payload": "<b64>", "key": null, "properties": {}, "event_time": null}]}
produce answer:
    {"message_ids": ["(ledger,entry,partition,batch_index)", ...]}   (in message order)

consume request:
    {"url": ..., "topic": ..., "subscription": ..., "count": 5, "timeout_secs": 10.0,
     "initial_position": "earliest|latest", "subscription_type": "shared|exclusive|failover|key_shared",
     "ack": true, "operation_timeout_secs": 10}

End-to-end encryption (PIP-4), both optional: a produce request may carry
    "encryption": {"public_key": "<pem path>", "private_key": "<pem path>", "key_name": "..."}
(the producer encrypts for key_name with pulsar.CryptoKeyReader over the two files), and a
consume request
    "encryption": {"public_key": ..., "private_key": ..., "failure_action": "fail|discard|consume"}
consume answer (at most `count` messages, fewer if the timeout ran out first):
    {"messages": [{"payload": "<b64>", "key": null, "ordering_key": null, "properties": {},
                   "event_time": null, "publish_time": 1700000000000, "message_id": "(l,e,p,b)",
                   "redelivery_count": 0, "topic": "persistent://...", "producer_name": "..."}]}

Notes on pulsar-lite (see shared/design/pulsar-lite.md): the Python API cannot tell an empty key
from no key, so "" is reported as null; event_time 0 means "not set" and is reported as null.
"""

import base64
import json
import os
import sys
import threading
import time


def _reserve_stdout():
    """Keep the real stdout for our JSON answer and point fd 1 at stderr, so that nothing the
    C++ client (or anything else) prints can corrupt the answer."""
    sys.stdout.flush()
    answer_fd = os.dup(1)
    os.dup2(2, 1)
    return os.fdopen(answer_fd, "w")


ANSWER = _reserve_stdout()

import pulsar  # noqa: E402  (after the stdout redirection on purpose)

COMPRESSION = {
    "none": pulsar.CompressionType.NONE,
    "lz4": pulsar.CompressionType.LZ4,
    "zlib": pulsar.CompressionType.ZLib,
    "zstd": pulsar.CompressionType.ZSTD,
    "snappy": pulsar.CompressionType.SNAPPY,
}

CONSUMER_TYPE = {
    "exclusive": pulsar.ConsumerType.Exclusive,
    "shared": pulsar.ConsumerType.Shared,
    "failover": pulsar.ConsumerType.Failover,
    "keyshared": pulsar.ConsumerType.KeyShared,
    "key_shared": pulsar.ConsumerType.KeyShared,
}

INITIAL_POSITION = {
    "earliest": pulsar.InitialPosition.Earliest,
    "latest": pulsar.InitialPosition.Latest,
}


def _logger():
    # The C++ client's own console logger (it prints to fd 1, which is stderr here). A Python
    # logging.Logger would be called back from C++ threads and can crash the interpreter at exit
    # ("terminate called without an active exception").
    level = os.environ.get("PULSAR_OFFICIAL_LOG", "warn").capitalize()
    return pulsar.ConsoleLogger(getattr(pulsar.LoggerLevel, level, pulsar.LoggerLevel.Warn))


def _client(req):
    # TLS (pulsar+ssl:// URLs): the CA file from PULSAR_OFFICIAL_TLS_TRUST_CERTS, hostname
    # validated (tests/interop/tls.rs).
    tls = {}
    # The variable is process-wide in the interop binary (other tests' children inherit it once
    # tests/interop/tls.rs has set it): only a TLS URL uses it.
    trust = os.environ.get("PULSAR_OFFICIAL_TLS_TRUST_CERTS")
    if trust and req["url"].startswith("pulsar+ssl://"):
        tls = {"tls_trust_certs_file_path": trust, "tls_validate_hostname": True}
    return pulsar.Client(
        req["url"],
        operation_timeout_seconds=int(req.get("operation_timeout_secs", 10)),
        connection_timeout_ms=5000,
        logger=_logger(),
        **tls,
    )


def _lookup(table, name, what):
    try:
        return table[str(name).lower()]
    except KeyError:
        raise SystemExit(f"official.py: unknown {what} {name!r}; expected one of {sorted(table)}")


def produce(req):
    client = _client(req)
    try:
        kwargs = dict(
            batching_enabled=bool(req.get("batching", False)),
            compression_type=_lookup(COMPRESSION, req.get("compression", "none"), "compression"),
            send_timeout_millis=int(req.get("operation_timeout_secs", 10)) * 1000,
        )
        if req.get("producer_name"):
            kwargs["producer_name"] = req["producer_name"]
        if req.get("chunking"):
            # PIP-37: messages above the broker's maximum size go out as chunks (batching off).
            kwargs["chunking_enabled"] = True
        enc = req.get("encryption")
        if enc:
            kwargs["encryption_key"] = enc["key_name"]
            kwargs["crypto_key_reader"] = pulsar.CryptoKeyReader(enc["public_key"], enc["private_key"])
        if kwargs["batching_enabled"]:
            # Keep every message of a request in as few batches as possible.
            kwargs["batching_max_publish_delay_ms"] = 50
        producer = client.create_producer(req["topic"], **kwargs)
        messages = req.get("messages", [])
        ids = [None] * len(messages)

        def send_kwargs(m):
            kw = {}
            if m.get("key") is not None:
                kw["partition_key"] = m["key"]
            if m.get("properties"):
                kw["properties"] = dict(m["properties"])
            if m.get("event_time") is not None:
                kw["event_timestamp"] = int(m["event_time"])
            return kw

        if kwargs["batching_enabled"]:
            # Asynchronous sends let the producer batch; the ids come back through callbacks.
            done = threading.Event()
            errors = []
            remaining = [len(messages)]
            lock = threading.Lock()

            def callback_for(i):
                def cb(res, msg_id):
                    with lock:
                        if res != pulsar.Result.Ok:
                            errors.append(f"message {i}: {res}")
                        else:
                            ids[i] = str(msg_id)
                        remaining[0] -= 1
                        if remaining[0] == 0:
                            done.set()
                return cb

            if not messages:
                done.set()
            for i, m in enumerate(messages):
                producer.send_async(base64.b64decode(m["payload"]), callback_for(i), **send_kwargs(m))
            producer.flush()
            if not done.wait(float(req.get("operation_timeout_secs", 10)) + 5):
                raise RuntimeError("timed out waiting for send receipts")
            if errors:
                raise RuntimeError("send failed: " + "; ".join(errors))
        else:
            # Synchronous sends: one at a time, in order (also avoids pulsar-lite's
            # duplicate-dispatch bug, which needs pipelined sends).
            for i, m in enumerate(messages):
                ids[i] = str(producer.send(base64.b64decode(m["payload"]), **send_kwargs(m)))
        producer.close()
        return {"message_ids": ids}
    finally:
        client.close()


def _text(value):
    """bytes or str -> str, with "" (the Python API's "not set") -> None."""
    if isinstance(value, (bytes, bytearray)):
        value = value.decode("utf-8", "replace")
    return value or None


def consume(req):
    client = _client(req)
    try:
        crypto = {}
        enc = req.get("encryption")
        if enc:
            crypto["crypto_key_reader"] = pulsar.CryptoKeyReader(enc["public_key"], enc["private_key"])
            crypto["crypto_failure_action"] = _lookup(
                {"fail": pulsar.ConsumerCryptoFailureAction.FAIL,
                 "discard": pulsar.ConsumerCryptoFailureAction.DISCARD,
                 "consume": pulsar.ConsumerCryptoFailureAction.CONSUME},
                enc.get("failure_action", "fail"), "crypto failure action")
        # Dead-letter policy (Shared): every message received is negatively acked ("nack"),
        # so after max_redeliver_count redeliveries the client publishes it to the topic.
        dlq = req.get("dead_letter")
        if dlq:
            crypto["dead_letter_policy"] = pulsar.ConsumerDeadLetterPolicy(
                max_redeliver_count=int(dlq["max_redeliver_count"]),
                dead_letter_topic=dlq["topic"])
            crypto["negative_ack_redelivery_delay_ms"] = 100
        consumer = client.subscribe(
            req["topic"],
            req["subscription"],
            **crypto,
            consumer_type=_lookup(CONSUMER_TYPE, req.get("subscription_type", "shared"),
                                  "subscription type"),
            initial_position=_lookup(INITIAL_POSITION, req.get("initial_position", "earliest"),
                                     "initial position"),
        )
        count = int(req["count"])
        deadline = time.monotonic() + float(req.get("timeout_secs", 10))
        ack = bool(req.get("ack", True))
        out = []
        while len(out) < count:
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if remaining_ms <= 0:
                break
            try:
                msg = consumer.receive(timeout_millis=remaining_ms)
            except pulsar.Timeout:
                break
            event_time = msg.event_timestamp()
            out.append({
                "payload": base64.b64encode(msg.data()).decode("ascii"),
                "key": msg.partition_key() or None,
                "ordering_key": _text(msg.ordering_key()),
                "properties": dict(msg.properties()),
                "event_time": event_time if event_time else None,
                "publish_time": msg.publish_timestamp(),
                "message_id": str(msg.message_id()),
                "redelivery_count": msg.redelivery_count(),
                "topic": msg.topic_name(),
                "producer_name": msg._message.producer_name(),
            })
            if req.get("nack"):
                consumer.negative_acknowledge(msg)
            elif ack:
                consumer.acknowledge(msg)
        consumer.close()
        return {"messages": out}
    finally:
        client.close()


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in ("produce", "consume"):
        raise SystemExit("usage: official.py produce|consume < request.json")
    req = json.load(sys.stdin)
    answer = produce(req) if sys.argv[1] == "produce" else consume(req)
    ANSWER.write(json.dumps(answer))
    ANSWER.write("\n")
    ANSWER.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: the C++ client's threads can abort it after the work is done.
    os._exit(0)


if __name__ == "__main__":
    main()
