#!/usr/bin/env python3
"""Interop helper for typed messages: drive the official client's `pulsar.schema` for
tests/interop/schema.rs.

    python schema_official.py info     < request.json
    python schema_official.py produce  < request.json
    python schema_official.py consume  < request.json

One JSON object on stdin, one on stdout (fd 1 is pointed at stderr meanwhile, so nothing the C++
client prints can corrupt the answer).

Schemas ("schema" in the request): "json" (JsonSchema of the record User below), "avro"
(AvroSchema of the record Measurement below: fastavro, from the `avro` extra), "string"
(StringSchema), and, for the encodings the Python client has no schema class for, BytesSchema
with the value packed by Python's `struct` as upstream's Java schemas encode it (big-endian):
"int8", "int16", "int32", "int64", "float", "double", "bool", and "kv" (an inline key/value of a
UTF-8 key and an INT32 value: [i32 key length][key][i32 value length][value]; values are
[key, value] pairs).

info answer:    {"json_definition": "<what JsonSchema(User) registers>",
                 "avro_definition": "<what AvroSchema(Measurement) registers>"}
produce request: {"url", "topic", "schema", "values": [...]}  (json: {"name", "age", "tags"};
                 avro: Measurement's fields, null for an absent optional one)
consume request: {"url", "topic", "subscription", "schema", "count", "timeout_secs",
                 "operation_timeout_secs" (optional, default 10)}; a Shared subscription
consume answer:  {"values": [...]}   (records: their fields; packed kinds: the unpacked value)
"""

import json
import os
import struct
import sys


def _reserve_stdout():
    sys.stdout.flush()
    answer_fd = os.dup(1)
    os.dup2(2, 1)
    return os.fdopen(answer_fd, "w")


ANSWER = _reserve_stdout()

import pulsar  # noqa: E402
from pulsar.schema import (  # noqa: E402
    Array, AvroSchema, Boolean, BytesSchema, Double, Float, Integer, JsonSchema, Long, Map,
    Record, String, StringSchema)


class User(Record):
    name = String()
    age = Integer()
    tags = Array(String())


class Measurement(Record):
    """Mirrored by `Measurement` in tests/interop/schema.rs (same name, namespace, field order
    and types; optional fields are ["null", T] unions, Python's default)."""
    _avro_namespace = "org.example.interop"
    id = Long(required=True)
    sensor = String()
    level = Integer()
    ratio = Float()
    value = Double()
    ok = Boolean()
    tags = Array(String())
    counts = Map(Integer())


PACKED = {"int8": ">b", "int16": ">h", "int32": ">i", "int64": ">q", "float": ">f",
          "double": ">d", "bool": ">?"}


def _schema(name):
    if name == "json":
        return JsonSchema(User)
    if name == "avro":
        return AvroSchema(Measurement)
    if name == "string":
        return StringSchema()
    return BytesSchema()


def _client(req):
    return pulsar.Client(req["url"],
                         operation_timeout_seconds=int(req.get("operation_timeout_secs", 10)),
                         connection_timeout_ms=5000,
                         logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))


def _encode_value(kind, v):
    if kind == "json":
        return User(name=v["name"], age=v["age"], tags=v["tags"])
    if kind == "avro":
        return Measurement(**v)
    if kind in PACKED:
        return struct.pack(PACKED[kind], v)
    if kind == "kv":
        key = v[0].encode("utf-8")
        value = struct.pack(">i", v[1])
        return struct.pack(">i", len(key)) + key + struct.pack(">i", len(value)) + value
    return v


def _decode_value(kind, v):
    if kind == "json":
        return {"name": v.name, "age": v.age, "tags": v.tags}
    if kind == "avro":
        assert isinstance(v, Measurement), type(v)
        return {name: getattr(v, name) for name in Measurement._fields}
    if kind in PACKED:
        return struct.unpack(PACKED[kind], v)[0]
    if kind == "kv":
        (klen,) = struct.unpack(">i", v[:4])
        key = v[4:4 + klen].decode("utf-8")
        (vlen,) = struct.unpack(">i", v[4 + klen:8 + klen])
        (value,) = struct.unpack(">i", v[8 + klen:8 + klen + vlen])
        assert len(v) == 8 + klen + vlen, "trailing bytes"
        return [key, value]
    return v


def info(_req):
    return {"json_definition": JsonSchema(User).schema_info().schema(),
            "avro_definition": AvroSchema(Measurement).schema_info().schema()}


def produce(req):
    client = _client(req)
    try:
        producer = client.create_producer(req["topic"], schema=_schema(req["schema"]),
                                          batching_enabled=False)
        for v in req["values"]:
            producer.send(_encode_value(req["schema"], v))
        producer.close()
        return {"sent": len(req["values"])}
    finally:
        client.close()


def consume(req):
    client = _client(req)
    try:
        consumer = client.subscribe(req["topic"], req["subscription"],
                                    schema=_schema(req["schema"]),
                                    consumer_type=pulsar.ConsumerType.Shared,
                                    initial_position=pulsar.InitialPosition.Earliest)
        values = []
        for _ in range(int(req["count"])):
            try:
                msg = consumer.receive(timeout_millis=int(float(req["timeout_secs"]) * 1000))
            except pulsar.Timeout:
                break
            values.append(_decode_value(req["schema"], msg.value()))
            consumer.acknowledge(msg)
        consumer.close()
        return {"values": values}
    finally:
        client.close()


def main():
    verb = sys.argv[1]
    req = json.load(sys.stdin)
    answer = {"info": info, "produce": produce, "consume": consume}[verb](req)
    ANSWER.write(json.dumps(answer))
    ANSWER.flush()


if __name__ == "__main__":
    main()
