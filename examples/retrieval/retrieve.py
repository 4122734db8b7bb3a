#!/usr/bin/env python3
"""A small retrieval app over okapi serve: embed documents, store the vectors, search, rerank.

  # two servers: an embedding model and a reranker (any llama-server-compatible server works)
  okapi serve -m bge-small-en-v1.5.gguf --embeddings --port 8081 &
  okapi serve -m bge-reranker-base.gguf --rerank --port 8082 &

  python3 examples/retrieval/retrieve.py index docs.txt --store store.json --embed-url http://127.0.0.1:8081
  python3 examples/retrieval/retrieve.py query "how do I bake bread?" --store store.json \\
      --embed-url http://127.0.0.1:8081 --rerank-url http://127.0.0.1:8082 --top 3

`index` embeds each non-empty line of the file (64 per request) and writes the store (JSON);
`query` embeds the question, takes the `--candidates` nearest documents by cosine similarity and,
with `--rerank-url`, reorders them by the cross-encoder's relevance score. Standard library only.
"""
import argparse
import json
import math
import sys
import urllib.error
import urllib.request


def post(url, body):
    request = urllib.request.Request(url, data=json.dumps(body).encode("utf-8"),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=600) as response:
            return json.load(response)
    except urllib.error.HTTPError as e:
        detail = e.read().decode("utf-8", "replace")
        sys.exit(f"retrieve: error: {url} answered {e.code}: {detail}")
    except urllib.error.URLError as e:
        sys.exit(f"retrieve: error: cannot reach {url}: {e.reason}")


def embed(base_url, texts):
    body = post(base_url.rstrip("/") + "/v1/embeddings", {"input": texts, "encoding_format": "float"})
    return [item["embedding"] for item in sorted(body["data"], key=lambda item: item["index"])]


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm > 0 else 0.0


def index(args):
    with open(args.file, encoding="utf-8") as f:
        docs = [line.strip() for line in f if line.strip()]
    if not docs:
        sys.exit(f"retrieve: error: {args.file} has no non-empty line")
    vectors = []
    for start in range(0, len(docs), 64):
        vectors += embed(args.embed_url, docs[start:start + 64])
    with open(args.store, "w", encoding="utf-8") as f:
        json.dump({"documents": [{"text": d, "embedding": v} for d, v in zip(docs, vectors)]}, f)
    print(f"indexed {len(docs)} documents ({len(vectors[0])} dimensions) into {args.store}")


def query(args):
    with open(args.store, encoding="utf-8") as f:
        docs = json.load(f)["documents"]
    question = embed(args.embed_url, [args.question])[0]
    scored = sorted(((cosine(question, d["embedding"]), i) for i, d in enumerate(docs)), reverse=True)
    candidates = [i for _, i in scored[:args.candidates]]
    if args.rerank_url:
        body = post(args.rerank_url.rstrip("/") + "/v1/rerank",
                    {"query": args.question, "documents": [docs[i]["text"] for i in candidates], "top_n": args.top})
        ranked = [(r["relevance_score"], candidates[r["index"]]) for r in body["results"]]
        label = "rerank score"
    else:
        ranked = scored[:args.top]
        label = "cosine"
    for score, i in ranked[:args.top]:
        print(f"{label} {score:8.4f}  {docs[i]['text']}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("index", help="embed the lines of a file into a store")
    p.add_argument("file")
    p.add_argument("--store", required=True)
    p.add_argument("--embed-url", required=True)
    p.set_defaults(run=index)
    q = sub.add_parser("query", help="find the documents nearest a question")
    q.add_argument("question")
    q.add_argument("--store", required=True)
    q.add_argument("--embed-url", required=True)
    q.add_argument("--rerank-url")
    q.add_argument("--candidates", type=int, default=20)
    q.add_argument("--top", type=int, default=5)
    q.set_defaults(run=query)
    args = parser.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
