#!/usr/bin/env python3
"""Interop helper for table views: the official client's `create_table_view` (pulsar-client
3.13, C++ client 4.2) for tests/interop/table_view.rs.

    python table_view_official.py view < request.json

request: {"url": "pulsar://127.0.0.1:PORT", "topic": "...", "subscription": "..."}
answer:  {"entries": {"<key>": "<b64 value>", ...}, "len": N}

`create_table_view` returns once the view has read the topic's existing messages; the entries
are then collected with `for_each_and_listen` (its first pass: every entry) and checked against
`get` and `len`, the API the Python client offers (get, for_each, for_each_and_listen, close).
One JSON object on stdin, one on stdout (fd 1 is pointed at stderr meanwhile, so nothing the C++
client prints can corrupt the answer).
"""

import base64
import json
import os
import sys
import threading


def _reserve_stdout():
    sys.stdout.flush()
    answer_fd = os.dup(1)
    os.dup2(2, 1)
    return os.fdopen(answer_fd, "w")


ANSWER = _reserve_stdout()

import pulsar  # noqa: E402


def view(req):
    client = pulsar.Client(
        req["url"],
        operation_timeout_seconds=10,
        connection_timeout_ms=5000,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn),
    )
    try:
        tv = client.create_table_view(req["topic"], subscription_name=req.get("subscription"))
        entries = {}
        lock = threading.Lock()

        def seen(key, value):
            with lock:
                entries[key] = value

        # The first pass runs before this returns (the C++ TableViewImpl iterates its map,
        # then registers the listener, under one lock).
        tv.for_each_and_listen(seen)
        with lock:
            snapshot = dict(entries)
        for key, value in snapshot.items():
            if tv.get(key) != value:
                raise RuntimeError(f"get({key!r}) disagrees with for_each_and_listen")
        answer = {
            "entries": {k: base64.b64encode(v).decode("ascii") for k, v in snapshot.items()},
            "len": len(tv),
        }
        tv.close()
        return answer
    finally:
        client.close()


def main():
    if len(sys.argv) != 2 or sys.argv[1] != "view":
        raise SystemExit("usage: table_view_official.py view < request.json")
    answer = view(json.load(sys.stdin))
    ANSWER.write(json.dumps(answer))
    ANSWER.write("\n")
    ANSWER.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: the C++ client's threads can abort it after the work is done.
    os._exit(0)


if __name__ == "__main__":
    main()
