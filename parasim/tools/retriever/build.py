"""Build a retriever index: ``python -m parasim.tools.retriever.build --corpus C.jsonl --out DIR --model PATH``.

For real use, ``--model`` is a local copy of intfloat/e5-base-v2 (its query / passage prefixes are
applied automatically); any sentence-transformers model directory works.
"""
from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict

from parasim.tools.retriever.index import build_index


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m parasim.tools.retriever.build", description=__doc__)
    parser.add_argument("--corpus", required=True, help="JSONL: {id, contents} or {id, title, text} per line")
    parser.add_argument("--out", required=True, help="index directory to write")
    parser.add_argument("--model", required=True, help="sentence-transformers model path (e.g. a local e5-base-v2)")
    parser.add_argument("--max-length", type=int, default=256, help="tokens per passage (Search-R1 uses 256)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--query-prefix", default=None, help="override the model's default query prefix")
    parser.add_argument("--passage-prefix", default=None, help="override the model's default passage prefix")
    args = parser.parse_args(argv)
    if (args.query_prefix is None) != (args.passage_prefix is None):
        parser.error("--query-prefix and --passage-prefix go together")
    prefixes = None if args.query_prefix is None else (args.query_prefix, args.passage_prefix)
    start = time.perf_counter()
    meta = build_index(args.corpus, args.out, args.model, prefixes=prefixes, max_length=args.max_length,
                       device=args.device, batch_size=args.batch_size)
    print(json.dumps({**asdict(meta), "seconds": round(time.perf_counter() - start, 2)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
