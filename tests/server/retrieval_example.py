#!/usr/bin/env python3
"""The README's retrieval app (examples/retrieval/retrieve.py) against two okapi servers: a
2-layer all-minilm-l6-v2 synth model with --embeddings and a 2-layer bge-reranker-base synth model
with --rerank. Index the example documents, query with and without the reranker, and check the
answers' shape and order (random weights: the ranking itself means nothing)."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

okapi, repo = sys.argv[1], sys.argv[2]
example = os.path.join(repo, "examples", "retrieval")
work = tempfile.mkdtemp(prefix="okapi-retrieval-")
servers = []


def fail(message):
    print(f"FAIL: {message}")
    sys.exit(1)


def start(model, *flags):
    log = open(os.path.join(work, os.path.basename(model) + ".log"), "w+")
    proc = subprocess.Popen([okapi, "serve", "-m", model, "--port", "0", "-t", "1", *flags], stdout=log,
                            stderr=subprocess.STDOUT)
    servers.append(proc)
    deadline = time.time() + 120
    while time.time() < deadline:
        log.seek(0)
        m = re.search(r"listening on (http://[0-9.]+:\d+)", log.read())
        if m:
            try:
                with urllib.request.urlopen(m.group(1) + "/health", timeout=5) as r:
                    if r.status == 200:
                        return m.group(1)
            except Exception:
                pass
        if proc.poll() is not None:
            log.seek(0)
            fail(f"server for {model} exited: {log.read()}")
        time.sleep(0.1)
    fail(f"server for {model} did not come up")


def retrieve(*args):
    r = subprocess.run([sys.executable, os.path.join(example, "retrieve.py"), *args], capture_output=True, text=True,
                       timeout=300)
    if r.returncode != 0:
        fail(f"retrieve.py {' '.join(args)}: exit {r.returncode}: {r.stderr}")
    return r.stdout


try:
    embedder = os.path.join(work, "minilm.gguf")
    reranker = os.path.join(work, "reranker.gguf")
    for preset, path in (("all-minilm-l6-v2", embedder), ("bge-reranker-base", reranker)):
        subprocess.run([okapi, "synth", "--preset", preset, "--layers", "2", "-o", path], check=True,
                       capture_output=True)
    embed_url = start(embedder)  # an encoder is served as embeddings without --embeddings
    rerank_url = start(reranker, "--rerank")
    store = os.path.join(work, "store.json")
    docs = [line.strip() for line in open(os.path.join(example, "docs.txt"), encoding="utf-8") if line.strip()]

    out = retrieve("index", os.path.join(example, "docs.txt"), "--store", store, "--embed-url", embed_url)
    if out.strip() != f"indexed {len(docs)} documents (384 dimensions) into {store}":
        fail(f"index printed {out!r}")
    stored = json.load(open(store, encoding="utf-8"))["documents"]
    if [d["text"] for d in stored] != docs or any(len(d["embedding"]) != 384 for d in stored):
        fail("the store does not hold one 384-value vector per document")

    for extra, label in (([], "cosine"), (["--rerank-url", rerank_url], "rerank score")):
        out = retrieve("query", "how do I bake bread?", "--store", store, "--embed-url", embed_url, "--top", "3",
                       *extra)
        lines = out.strip().splitlines()
        if len(lines) != 3:
            fail(f"query ({label}) printed {out!r}")
        scores = []
        for line in lines:
            m = re.match(re.escape(label) + r" +(-?[0-9.]+)  (.*)$", line)
            if not m or m.group(2) not in docs:
                fail(f"query ({label}) line {line!r}")
            scores.append(float(m.group(1)))
        if scores != sorted(scores, reverse=True):
            fail(f"query ({label}) scores are not in decreasing order: {scores}")
    print("retrieval example: index, cosine search and rerank work")
finally:
    for proc in servers:
        proc.terminate()
    for proc in servers:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    shutil.rmtree(work, ignore_errors=True)
