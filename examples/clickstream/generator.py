#!/usr/bin/env python3
"""Clickstream generator: JSON click events into an oncelog (or any Kafka) topic, keyed by user.

    python examples/clickstream/generator.py --bootstrap 127.0.0.1:9092 --rate 500 --seconds 30

Each event: {"id": "<run>-<n>", "user": "u17", "page": "/product/3", "referrer": "search", "ts": <ms>}.
A few events are sent late (their event time up to --max-lateness-ms in the past) to exercise the watermark.
At the end one "/_tick" event far ahead in event time pushes the job's watermark past every real window, so the
last windows are emitted too (append mode emits a window only once the watermark passes its end).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import uuid

from oncelog.client import Producer

PAGES = ["/", "/search", "/cart", "/checkout"] + [f"/product/{i}" for i in range(20)] + \
        [f"/blog/{i}" for i in range(5)]
REFERRERS = ["direct", "search", "ads", "social", "email"]
TICK_PAGE = "/_tick"


def events(n: int, seed: int, max_lateness_ms: int, run: str, start_ms: int | None = None,
           rate: float = 1000.0) -> list[dict[str, object]]:
    """``n`` events ``1/rate`` s apart in event time; about 5% of them late by up to ``max_lateness_ms``."""
    rnd = random.Random(seed)
    t0 = start_ms if start_ms is not None else int(time.time() * 1000)
    out: list[dict[str, object]] = []
    for i in range(n):
        ts = t0 + int(i * 1000 / rate)
        if rnd.random() < 0.05:
            ts -= rnd.randrange(max_lateness_ms)
        user = f"u{int(rnd.paretovariate(1.2)) % 500}"
        out.append({"id": f"{run}-{i}", "user": user, "page": rnd.choice(PAGES),
                    "referrer": rnd.choice(REFERRERS), "ts": ts})
    return out


def tick(run: str, after_ms: int) -> dict[str, object]:
    return {"id": f"{run}-tick", "user": "system", "page": TICK_PAGE, "referrer": "direct", "ts": after_ms}


def send(producer: Producer, topic: str, evs: list[dict[str, object]]) -> None:
    for e in evs:
        producer.produce(topic, json.dumps(e).encode(), key=str(e["user"]).encode())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--topic", default="clicks")
    ap.add_argument("--rate", type=float, default=500.0, help="events per second")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--max-lateness-ms", type=int, default=8000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    run = uuid.uuid4().hex[:6]
    total = int(args.rate * args.seconds)
    evs = events(total, args.seed, args.max_lateness_ms, run, rate=args.rate)
    producer = Producer({"bootstrap.servers": args.bootstrap, "linger.ms": 20})
    started = time.monotonic()
    step = max(1, int(args.rate // 10))
    for i in range(0, total, step):
        send(producer, args.topic, evs[i:i + step])
        producer.poll(0)
        lag = started + (i + step) / args.rate - time.monotonic()
        if lag > 0:
            time.sleep(lag)
    last = max(int(e["ts"]) for e in evs) if evs else int(time.time() * 1000)  # type: ignore[call-overload]
    send(producer, args.topic, [tick(run, last + 120_000)])
    producer.flush(30)
    producer.close()
    print(json.dumps({"run": run, "events": total}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
