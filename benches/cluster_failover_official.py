"""The official client's side of `benches/cluster_failover.rs` (PIP-121).

usage: cluster_failover_official.py PRIMARY_URL STANDBY_URL TOPIC COUNT RATE CHECK_INTERVAL_MS

Two clients (producer, consumer), each with `pulsar.AutoClusterFailover(primary, [standby],
CHECK_INTERVAL_MS, failover_threshold=1, switch_back_threshold=1)`. The producer sends the
payloads "0".."COUNT-1" at RATE per second (send_async); the consumer (Shared, earliest) acks
what it receives. Prints one JSON line: the wall-clock time of each receipt and each delivery.
"""

import json
import sys
import threading
import time

import pulsar


def client(primary, standby, interval_ms):
    failover = pulsar.AutoClusterFailover(
        pulsar.ServiceInfo(primary),
        [pulsar.ServiceInfo(standby)],
        check_interval_ms=interval_ms,
        failover_threshold=1,
        switch_back_threshold=1,
    )
    return pulsar.Client(
        failover,
        operation_timeout_seconds=30,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )


def main():
    primary, standby, topic, count, rate, interval_ms = sys.argv[1:7]
    count, rate, interval_ms = int(count), int(rate), int(interval_ms)
    pc = client(primary, standby, interval_ms)
    cc = client(primary, standby, interval_ms)
    consumer = cc.subscribe(
        topic,
        "live",
        consumer_type=pulsar.ConsumerType.Shared,
        initial_position=pulsar.InitialPosition.Earliest,
    )
    producer = pc.create_producer(topic, send_timeout_millis=120000, block_if_queue_full=True)
    acked, failed, received = [], [0], []
    lock = threading.Lock()
    stop = threading.Event()

    def read():
        while not stop.is_set():
            try:
                m = consumer.receive(timeout_millis=200)
            except Exception:
                continue
            with lock:
                received.append([int(m.data()), time.time()])
            consumer.acknowledge(m)

    reader = threading.Thread(target=read)
    reader.start()

    def done(i):
        def callback(res, _msg_id):
            with lock:
                if res == pulsar.Result.Ok:
                    acked.append([i, time.time()])
                else:
                    failed[0] += 1
        return callback

    start = time.monotonic()
    for i in range(count):
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        producer.send_async(str(i).encode(), done(i))
    producer.flush()
    # Until every acknowledged message arrived, or nothing arrived for 5 s (what the standby
    # kept after the switch back stays there: the driver reads it), at most 60 s.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with lock:
            if len(acked) + failed[0] >= count and {i for i, _ in received} >= {i for i, _ in acked}:
                break
            quiet = not received or time.time() - received[-1][1] > 5
        if quiet and len(acked) + failed[0] >= count:
            break
        time.sleep(0.1)
    stop.set()
    reader.join()
    print(json.dumps({"acked": acked, "failed": failed[0], "received": received}))
    pc.close()
    cc.close()


if __name__ == "__main__":
    main()
