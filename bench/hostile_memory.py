#!/usr/bin/env python3
"""Resident memory of a server process (okapi serve or llama-server) before and after hostile
request bodies: deeply nested JSON, large strings, large arrays, alternating, from several
threads at once (glibc's per-thread arenas are what kept such memory before).

  python3 bench/hostile_memory.py --port 8080 --pid PID --requests 1000 [--threads 4]
"""
import argparse
import json
import socket
import threading
import time


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def post(host, port, path, body, timeout=60):
    head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(head + body)
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        return int(data[9:12]) if data.startswith(b"HTTP/1.") else None
    except (OSError, ValueError):
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--label", default="server")
    ap.add_argument("--json")
    args = ap.parse_args()

    bodies = [
        b"[" * 1_000_000,
        json.dumps({"prompt": "a" * (6 << 20), "max_tokens": 1}).encode(),
        json.dumps({"prompt": [1] * 400_000, "max_tokens": 1}).encode(),
        json.dumps({"messages": [{"role": "user", "content": "x" * 1000}] * 2000, "max_tokens": 1}).encode(),
    ]
    # Warm-up: each kind once.
    for b in bodies:
        post(args.host, args.port, "/v1/completions", b)
    time.sleep(1)
    idle = rss_kib(args.pid)
    statuses = {}
    lock = threading.Lock()
    counter = iter(range(args.requests))

    def worker():
        for i in counter:
            status = post(args.host, args.port, "/v1/completions", bodies[i % len(bodies)])
            with lock:
                statuses[status] = statuses.get(status, 0) + 1

    peak = idle
    threads = [threading.Thread(target=worker) for _ in range(args.threads)]
    start = time.monotonic()
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        peak = max(peak, rss_kib(args.pid))
        time.sleep(0.2)
    elapsed = time.monotonic() - start
    time.sleep(1)
    after = rss_kib(args.pid)
    print(f"{'server':<14} {'requests':>8} {'idle MiB':>9} {'peak MiB':>9} {'after MiB':>10} {'after/idle':>10} "
          f"{'seconds':>8}  statuses")
    print(f"{args.label:<14} {args.requests:>8} {idle / 1024:>9.1f} {peak / 1024:>9.1f} {after / 1024:>10.1f} "
          f"{after / idle:>10.2f} {elapsed:>8.1f}  {statuses}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"label": args.label, "requests": args.requests, "idle_kib": idle, "peak_kib": peak,
                       "after_kib": after, "statuses": {str(k): v for k, v in statuses.items()}}, f, indent=2)


if __name__ == "__main__":
    main()
