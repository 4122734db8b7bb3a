#!/usr/bin/env python3
"""Slow clients against an HTTP server (okapi serve or llama-server): N connections each send a
partial request and then one header byte every INTERVAL seconds (a slowloris), reconnecting when
the server drops them so that N stay open; meanwhile /health is asked every 100 ms and a chat
completion every few seconds, each on a new connection. Prints latency percentiles and failures.

  python3 bench/slow_clients.py --port 8080 --connections 1000 --seconds 60 [--json out.json]
"""
import argparse
import json
import socket
import threading
import time


def percentile(values, p):
    if not values:
        return float("nan")
    values = sorted(values)
    k = min(len(values) - 1, max(0, int(round(p / 100.0 * (len(values) - 1)))))
    return values[k]


def read_response(s):
    """Reads one HTTP response: by Content-Length, chunked coding, or until close."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lower = head.lower()
    if b"content-length:" in lower:
        length = int(lower.split(b"content-length:")[1].split(b"\r\n")[0])
        while len(body) < length:
            chunk = s.recv(65536)
            if not chunk:
                break
            body += chunk
    elif b"transfer-encoding: chunked" in lower:
        while not body.endswith(b"0\r\n\r\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            body += chunk
    else:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            body += chunk
    return head + b"\r\n\r\n" + body


def one_request(host, port, request, timeout):
    """Sends a request on a new connection; returns (status or None, seconds to the whole answer)."""
    start = time.monotonic()
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(request)
            data = read_response(s)
        status = int(data[9:12]) if data.startswith(b"HTTP/1.") else None
        return status, time.monotonic() - start
    except (OSError, ValueError):
        return None, time.monotonic() - start


class Slowloris:
    def __init__(self, host, port, count, interval):
        self.host, self.port, self.count, self.interval = host, port, count, interval
        self.sockets = []
        self.reconnects = 0
        self.connect_failures = 0
        self.stop = threading.Event()

    def _open(self):
        try:
            s = socket.create_connection((self.host, self.port), timeout=5)
            s.setblocking(False)
            s.send(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            return s
        except OSError:
            self.connect_failures += 1
            return None

    def run(self):
        while len(self.sockets) < self.count and not self.stop.is_set():
            s = self._open()
            if s:
                self.sockets.append(s)
        while not self.stop.is_set():
            alive = []
            for s in self.sockets:
                try:
                    s.send(b"X")  # one more byte of an endless header name
                    alive.append(s)
                except OSError:
                    s.close()
            while len(alive) < self.count and not self.stop.is_set():
                s = self._open()
                if not s:
                    break
                self.reconnects += 1
                alive.append(s)
            self.sockets = alive
            self.stop.wait(self.interval)
        for s in self.sockets:
            s.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--connections", type=int, default=1000)
    ap.add_argument("--interval", type=float, default=5.0, help="seconds between a slow client's bytes")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--timeout", type=float, default=10.0, help="a probe slower than this failed")
    ap.add_argument("--label", default="server")
    ap.add_argument("--json")
    args = ap.parse_args()

    loris = Slowloris(args.host, args.port, args.connections, args.interval)
    attacker = threading.Thread(target=loris.run, daemon=True)
    attacker.start()
    time.sleep(min(10.0, args.seconds / 4))  # let the connections open

    health = b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    body = json.dumps({"messages": [{"role": "user", "content": "Once upon a time"}], "max_tokens": 16}).encode()
    chat = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    health_ms, health_failed = [], 0
    chat_ms, chat_failed = [], 0
    chat_results = []

    def chats():
        while not loris.stop.is_set():
            chat_results.append(one_request(args.host, args.port, chat, 60.0))
            loris.stop.wait(3.0)

    chatter = threading.Thread(target=chats, daemon=True)
    chatter.start()
    open_at_start = len(loris.sockets)
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        status, seconds = one_request(args.host, args.port, health, args.timeout)
        if status == 200:
            health_ms.append(seconds * 1000)
        else:
            health_failed += 1
        time.sleep(0.1)
    loris.stop.set()
    chatter.join(timeout=65)
    for status, seconds in chat_results:
        if status == 200:
            chat_ms.append(seconds * 1000)
        else:
            chat_failed += 1
    result = {
        "label": args.label,
        "slow_connections": args.connections,
        "slow_open_at_start": open_at_start,
        "slow_reconnects": loris.reconnects,
        "health_ok": len(health_ms),
        "health_failed": health_failed,
        "health_p50_ms": percentile(health_ms, 50),
        "health_p99_ms": percentile(health_ms, 99),
        "health_max_ms": max(health_ms) if health_ms else float("nan"),
        "chat_ok": len(chat_ms),
        "chat_failed": chat_failed,
        "chat_p50_ms": percentile(chat_ms, 50),
    }
    print(f"{'server':<14} {'slow conns':>10} {'/health ok':>10} {'failed':>7} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'max ms':>8} {'chat ok':>8} {'failed':>7} {'chat p50 ms':>12}")
    print(f"{args.label:<14} {open_at_start:>10} {result['health_ok']:>10} {health_failed:>7} "
          f"{result['health_p50_ms']:>8.1f} {result['health_p99_ms']:>8.1f} {result['health_max_ms']:>8.1f} "
          f"{result['chat_ok']:>8} {chat_failed:>7} {result['chat_p50_ms']:>12.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
