"""The official client's side of `benches/scale.rs` (issue #39): what idle producers and
consumers cost in one client, and how fast they are created.

usage: scale_official.py URL N [IN_FLIGHT] [ENTITIES]

One client (the official C++ client through its Python wrapper), warmed up with a producer of
its own (so the connection is not counted), then N producers on N topics (and N consumers,
Shared, on N other topics), created by IN_FLIGHT threads at once (default 64; the wrapper
releases the GIL while the C++ client creates), and left idle for a second. Prints one JSON
line per entity kind: the resident set (/proc/self/statm) grown per entity and the creation
rate, the same fields `benches/scale.rs` prints (`rss_bytes_per_entity`, `created_per_sec`).
The heap is not counted here (the C++ client's allocations are not visible from Python):
compare RSS with RSS. ENTITIES is `producer,consumer` by default.
"""

import json
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pulsar


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def main():
    url, n = sys.argv[1], int(sys.argv[2])
    in_flight = int(sys.argv[3]) if len(sys.argv) > 3 else 64
    entities = (sys.argv[4] if len(sys.argv) > 4 else "producer,consumer").split(",")
    run = uuid.uuid4().hex[:8]
    client = pulsar.Client(
        url,
        operation_timeout_seconds=120,
        io_threads=1,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    warm = client.create_producer(f"persistent://public/default/scale-official-warm-{run}")
    for entity in entities:
        if entity == "producer":

            def create(i):
                return client.create_producer(
                    f"persistent://public/default/scale-official-p{run}-{i}"
                )

        elif entity == "consumer":

            def create(i):
                return client.subscribe(
                    f"persistent://public/default/scale-official-c{run}-{i}",
                    "scale",
                    consumer_type=pulsar.ConsumerType.Shared,
                )

        else:
            raise SystemExit(f"unknown entity {entity}")
        rss0 = rss_bytes()
        start = time.monotonic()
        with ThreadPoolExecutor(max_workers=in_flight) as pool:
            held = list(pool.map(create, range(n)))
        took = time.monotonic() - start
        time.sleep(1.0)
        rss1 = rss_bytes()
        print(
            json.dumps(
                {
                    "client": "official",
                    "entity": entity,
                    "n": n,
                    "in_flight": in_flight,
                    "rss_bytes_per_entity": round((rss1 - rss0) / n),
                    "created_per_sec": round(n / took),
                }
            ),
            flush=True,
        )
        for e in held:
            e.close()
    warm.close()
    client.close()


if __name__ == "__main__":
    main()
