#!/usr/bin/env python3
"""Constrained generation on a real small model: `okapi run --json-schema-file` for every schema of
tests/data/schemas (the bundled stories260K, seeded), then python3-jsonschema over every output
that ended by end of generation (schema_oracle.py). Fails when one such output is not valid JSON
for its schema, or when fewer than 95% of the schemas got a finished output within the token
limit (a story model may write a story inside an unbounded string; three seeds are tried). Under
OKAPI_SANITIZED (scripts/test_sanitized.sh) every third schema only.

usage: schema_generation.py OKAPI_BIN REPO_DIR
"""
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile

SEEDS = (1, 2, 3)
MAX_TOKENS = 1024


def generate(okapi, model, schema_path):
    """The first finished output over the seeds: (text or None, [stop reasons])."""
    stops = []
    for seed in SEEDS:
        run = subprocess.run(
            [okapi, "run", "-m", model, "--json-schema-file", schema_path, "-p", "Once", "-n", str(MAX_TOKENS),
             "-c", "2048", "--seed", str(seed), "-t", "1", "--json"],
            capture_output=True, text=True, timeout=300)
        if run.returncode != 0:
            raise RuntimeError(f"{schema_path}: okapi run exited {run.returncode}: {run.stderr[-2000:]}")
        record = json.loads(run.stdout)
        stops.append(record["stop"])
        if record["stop"] == "end of generation":
            return record["text"], stops
    return None, stops


def main():
    okapi, repo = sys.argv[1], sys.argv[2]
    model = os.path.join(repo, "models", "stories260K.gguf")
    folder = os.path.join(repo, "tests", "data", "schemas")
    schemas = sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".json"))
    assert len(schemas) >= 100, f"only {len(schemas)} schemas in {folder}"
    if os.environ.get("OKAPI_SANITIZED"):
        schemas = schemas[::3]  # the -O0 sanitizer build: a third of the corpus (the -O2 suite runs it all)
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda s: generate(okapi, model, s), schemas))
    cases = [{"schema": s, "instance": text} for s, (text, _) in zip(schemas, results) if text is not None]
    unfinished = [(os.path.basename(s), stops) for s, (text, stops) in zip(schemas, results) if text is None]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as f:
        json.dump(cases, f)
        cases_file = f.name
    try:
        oracle = subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), "schema_oracle.py"), cases_file],
                                capture_output=True, text=True)
    finally:
        os.unlink(cases_file)
    print(oracle.stdout, end="")
    print(f"{len(cases)} of {len(schemas)} schemas got a finished output; unfinished: {unfinished}")
    if oracle.returncode != 0:
        return 1
    if len(cases) < 0.95 * len(schemas):
        print("FAIL: fewer than 95% finished")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
