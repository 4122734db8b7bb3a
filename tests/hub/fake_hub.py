#!/usr/bin/env python3
"""A local stand-in for the Hugging Face hub, for okapi's hub tests (tests/hub/hub_test.cpp).

    fake_hub.py ROOT        serves ROOT/OWNER/NAME/PATH as repo OWNER/NAME's file PATH; prints "PORT n"

It answers the URLs okapi (like llama.cpp) asks:
  GET /api/models/OWNER/NAME/refs                     {"branches": [{"name": "main", "targetCommit": C}]}
  GET /api/models/OWNER/NAME/tree/C?recursive=true    [{"type": "file", "path", "size", "lfs": {"oid", "size"}}]
  GET /OWNER/NAME/resolve/C/PATH                      302 to /_cdn/OWNER/NAME/PATH on host "localhost"
                                                      (X-Linked-Etag / X-Linked-Size as the hub sends)
  GET /_cdn/OWNER/NAME/PATH                           the bytes; Range: bytes=N- gives 206
  GET /_requests                                      what was asked so far (JSON), for the tests to check
ROOT/_config.json maps a repo to its quirks:
  {"OWNER/NAME": {"token": "T"          every request needs Authorization: Bearer T (else 401),
                  "drop_after": N        the first GET of each file sends N bytes and drops the connection,
                  "wrong_sha": true      the tree lists a sha256 that the bytes do not have,
                  "tree_pages": K        the tree comes in pages of K entries (Link: rel="next")}}
"""
import hashlib
import json
import os
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COMMIT = "0123456789abcdef0123456789abcdef01234567"
ROOT = os.path.abspath(sys.argv[1])
LOCK = threading.Lock()
REQUESTS = []
DROPPED = set()


def config():
    try:
        with open(os.path.join(ROOT, "_config.json")) as f:
            return json.load(f)
    except FileNotFoundError:
        return {}


def repo_files(repo):
    base = os.path.join(ROOT, repo)
    out = []
    for dirpath, _, names in os.walk(base):
        for name in sorted(names):
            full = os.path.join(dirpath, name)
            out.append(os.path.relpath(full, base).replace(os.sep, "/"))
    return sorted(out)


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send_json(self, status, body, headers=None):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def authorized(self, repo):
        token = config().get(repo, {}).get("token")
        if token is None or self.headers.get("Authorization") == "Bearer " + token:
            return True
        self.send_json(401, {"error": "Invalid username or password."})
        return False

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        path = urllib.parse.unquote(url.path)
        with LOCK:
            REQUESTS.append({"path": path, "query": url.query, "range": self.headers.get("Range"),
                             "authorization": self.headers.get("Authorization"), "host": self.headers.get("Host")})
        if path == "/_requests":
            with LOCK:
                return self.send_json(200, REQUESTS)
        parts = path.strip("/").split("/")
        if len(parts) >= 5 and parts[:2] == ["api", "models"]:
            repo = parts[2] + "/" + parts[3]
            if not os.path.isdir(os.path.join(ROOT, repo)):
                return self.send_json(401 if "token" in config().get(repo, {}) else 404,
                                      {"error": "Repository not found"})
            if not self.authorized(repo):
                return
            if parts[4] == "refs":
                return self.send_json(200, {"branches": [{"name": "main", "ref": "refs/heads/main",
                                                          "targetCommit": COMMIT}], "converts": [], "tags": []})
            if parts[4] == "tree" and len(parts) == 6 and parts[5] == COMMIT:
                quirks = config().get(repo, {})
                entries = []
                for rel in repo_files(repo):
                    full = os.path.join(ROOT, repo, rel)
                    oid = sha256_of(full)
                    if quirks.get("wrong_sha"):
                        oid = hashlib.sha256(b"not these bytes").hexdigest()
                    size = os.path.getsize(full)
                    entries.append({"type": "file", "path": rel, "size": size, "oid": "0" * 40,
                                    "lfs": {"oid": oid, "size": size, "pointerSize": 134}})
                page_size = quirks.get("tree_pages")
                if not page_size:
                    return self.send_json(200, entries)
                query = urllib.parse.parse_qs(url.query)
                start = int(query.get("cursor", ["0"])[0])
                headers = {}
                if start + page_size < len(entries):
                    nxt = f"http://{self.headers.get('Host')}/api/models/{repo}/tree/{COMMIT}?recursive=true&cursor={start + page_size}"
                    headers["Link"] = f'<{nxt}>; rel="next"'
                return self.send_json(200, entries[start:start + page_size], headers)
            return self.send_json(404, {"error": "no such API path"})
        if len(parts) >= 5 and parts[2] == "resolve":
            repo = parts[0] + "/" + parts[1]
            rel = "/".join(parts[4:])
            full = os.path.join(ROOT, repo, rel)
            if not self.authorized(repo):
                return
            if parts[3] != COMMIT or not os.path.isfile(full):
                return self.send_json(404, {"error": "Entry not found"})
            port = self.server.server_address[1]
            self.send_response(302)
            self.send_header("Location", f"http://localhost:{port}/_cdn/{repo}/{urllib.parse.quote(rel)}")
            self.send_header("X-Linked-Etag", '"' + sha256_of(full) + '"')
            self.send_header("X-Linked-Size", str(os.path.getsize(full)))
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if len(parts) >= 4 and parts[0] == "_cdn":
            repo = parts[1] + "/" + parts[2]
            rel = "/".join(parts[3:])
            full = os.path.join(ROOT, repo, rel)
            if not os.path.isfile(full):
                return self.send_json(404, {"error": "Entry not found"})
            with open(full, "rb") as f:
                data = f.read()
            start = 0
            rng = self.headers.get("Range")
            if rng and rng.startswith("bytes=") and rng.endswith("-"):
                start = int(rng[6:-1])
                if start >= len(data):
                    return self.send_json(416, {"error": "range not satisfiable"})
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            else:
                self.send_response(200)
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Length", str(len(data) - start))
            self.end_headers()
            drop_after = config().get(repo, {}).get("drop_after")
            with LOCK:
                drop = drop_after is not None and full not in DROPPED
                DROPPED.add(full)
            if drop:
                self.wfile.write(data[start:start + drop_after])
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(2)
                return
            self.wfile.write(data[start:])
            return
        self.send_json(404, {"error": "not found"})


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print("PORT", server.server_address[1], flush=True)
server.serve_forever()
