"""The official client's side of `benches/chunking.rs` (PIP-37 large messages).

usage: chunking_official.py produce|consume URL TOPIC COUNT SIZE RECEIVER_QUEUE

produce: COUNT messages of SIZE bytes (chunking on, batching off, send_async then flush),
timed from the first send to the last receipt. consume: a fresh Shared subscription from
earliest reads until COUNT messages of SIZE bytes arrived (smaller ones are skipped), acking
each, timed from subscribe. Prints one JSON line with the bytes, the seconds and the peak RSS
of this process (ru_maxrss, KiB on Linux).
"""

import json
import os
import resource
import sys
import time

import pulsar


def main():
    mode, url, topic, count, size, queue = sys.argv[1:7]
    count, size, queue = int(count), int(size), int(queue)
    client = pulsar.Client(
        url,
        operation_timeout_seconds=60,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn),
    )
    total = 0
    if mode == "produce":
        producer = client.create_producer(
            topic,
            chunking_enabled=True,
            batching_enabled=False,
            block_if_queue_full=True,
            send_timeout_millis=120000,
        )
        payloads = [os.urandom(size), os.urandom(size)]
        failures = []

        def done(res, _msg_id):
            if res != pulsar.Result.Ok:
                failures.append(str(res))

        start = time.monotonic()
        for i in range(count):
            producer.send_async(payloads[i % 2], done)
            total += size
        producer.flush()
        elapsed = time.monotonic() - start
        if failures:
            raise SystemExit(f"sends failed: {failures[:3]}")
    else:
        start = time.monotonic()
        consumer = client.subscribe(
            topic,
            "bench-official",
            consumer_type=pulsar.ConsumerType.Shared,
            initial_position=pulsar.InitialPosition.Earliest,
            receiver_queue_size=queue,
        )
        got = 0
        while got < count:
            msg = consumer.receive(timeout_millis=180000)
            data = msg.data()
            consumer.acknowledge(msg)
            if len(data) >= size:
                got += 1
                total += len(data)
        elapsed = time.monotonic() - start
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    client.close()
    print(json.dumps({"bytes": total, "secs": elapsed, "peak_rss_kib": peak_kib}))


if __name__ == "__main__":
    main()
