"""Dense passage index: a sentence-transformers encoder over a JSONL corpus, searched with FAISS.

The corpus follows Search-R1's wiki-18 format, one JSON object per line with an ``id`` and either
``contents`` (first line the title, the rest the text) or ``title`` + ``text`` (joined into
``contents`` as ``"Title"\\ntext``, the way wiki-18 stores them). Embeddings are L2-normalized, so a
FAISS flat inner-product index returns exact cosine neighbours: exact search is what Search-R1's
e5_Flat index does and what a few-million-passage corpus affords.

e5 models were trained with ``"query: "`` / ``"passage: "`` prefixes and lose accuracy without
them; the prefixes are chosen when the index is built (e5 in the model's name turns them on) and
stored with it, so queries at serving time always match how passages were encoded.

An index directory holds ``index.faiss``, ``corpus.jsonl`` (documents in index order) and
``meta.json`` (encoder path, prefixes, max length, dimension, count).
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from parasim.config.jsonl import iter_json_objects

INDEX_FILE = "index.faiss"
CORPUS_FILE = "corpus.jsonl"
META_FILE = "meta.json"
E5_PREFIXES = ("query: ", "passage: ")


def default_prefixes(model_path: str) -> tuple[str, str]:
    """(query, passage) prefixes for a model: e5's when its name says e5, none otherwise."""
    name = Path(model_path.rstrip("/")).name.lower()
    return E5_PREFIXES if name.startswith("e5") or "-e5" in name or "/e5" in model_path.lower() else ("", "")


def read_corpus(path: str | Path) -> Iterator[dict[str, Any]]:
    """Yield corpus documents with a ``contents`` field; a bad line raises naming its number and field."""
    for where, row in iter_json_objects(path):
        if "id" not in row:
            raise ValueError(f"{where}: each line must be an object with an 'id' field")
        if "contents" not in row:
            if not isinstance(row.get("text"), str):
                raise ValueError(f"{where}: needs 'contents' or 'title' + 'text' (string) fields")
            title = row.get("title", "")
            row["contents"] = f'"{title}"\n{row["text"]}' if title else row["text"]
        if not isinstance(row["contents"], str):
            raise TypeError(f"{where}: 'contents' must be a string")
        row["id"] = str(row["id"])
        yield row


@dataclass(frozen=True)
class IndexMeta:
    """What serving needs to encode queries exactly as the passages were encoded."""

    model: str
    query_prefix: str
    passage_prefix: str
    max_length: int
    dim: int
    count: int


class Encoder:
    """A sentence-transformers model on one device, with the prefixes and length it was indexed with."""

    def __init__(self, model_path: str, *, query_prefix: str, passage_prefix: str, max_length: int = 256,
                 device: str = "cpu", batch_size: int = 64) -> None:
        from sentence_transformers import SentenceTransformer

        local = os.path.isdir(model_path)
        self.model = SentenceTransformer(model_path, device=device, local_files_only=local)
        self.model.max_seq_length = max_length
        self.query_prefix, self.passage_prefix = query_prefix, passage_prefix
        self.max_length, self.batch_size = max_length, batch_size

    @property
    def dim(self) -> int:
        get = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        return int(get())  # renamed in sentence-transformers 6

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        emb = self.model.encode(list(texts), batch_size=self.batch_size, normalize_embeddings=True,
                                convert_to_numpy=True, show_progress_bar=False)
        return np.ascontiguousarray(emb, dtype=np.float32)

    def queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode([self.query_prefix + t for t in texts])

    def passages(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode([self.passage_prefix + t for t in texts])


def build_index(corpus: str | Path, out_dir: str | Path, model_path: str, *,
                prefixes: tuple[str, str] | None = None, max_length: int = 256, device: str = "cpu",
                batch_size: int = 64, chunk_docs: int = 16384, encoder: Encoder | None = None) -> IndexMeta:
    """Encode every passage of ``corpus`` and write an index directory; returns its metadata.

    The corpus streams through in chunks of ``chunk_docs``: memory holds the index, never the corpus.
    """
    import faiss

    query_prefix, passage_prefix = prefixes if prefixes is not None else default_prefixes(model_path)
    enc = encoder or Encoder(model_path, query_prefix=query_prefix, passage_prefix=passage_prefix,
                             max_length=max_length, device=device, batch_size=batch_size)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    index = None
    with open(out / CORPUS_FILE, "w", encoding="utf-8") as f:
        for chunk in _chunks(read_corpus(corpus), chunk_docs):
            emb = enc.passages([d["contents"] for d in chunk])
            if index is None:
                index = faiss.IndexFlatIP(emb.shape[1])
            index.add(emb)
            f.writelines(json.dumps(d, ensure_ascii=False) + "\n" for d in chunk)
    if index is None:
        raise ValueError(f"{corpus}: the corpus is empty")
    faiss.write_index(index, str(out / INDEX_FILE))
    meta = IndexMeta(model=model_path, query_prefix=enc.query_prefix, passage_prefix=enc.passage_prefix,
                     max_length=enc.max_length, dim=int(index.d), count=int(index.ntotal))
    (out / META_FILE).write_text(json.dumps(asdict(meta), indent=2) + "\n", encoding="utf-8")
    return meta


def _chunks(items: Iterator[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    chunk: list[dict[str, Any]] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class DenseIndex:
    """A loaded index directory: ``search`` returns documents and cosine scores, best first.

    Documents stay on disk: only their byte offsets are in memory (8 bytes each, 170 MB for
    wiki-18's 21M passages instead of tens of GB of parsed JSON), and hits are read with ``pread``.
    """

    def __init__(self, index_dir: str | Path, *, model_path: str | None = None, device: str = "cpu",
                 encoder: Encoder | None = None) -> None:
        import faiss

        root = Path(index_dir)
        for name in (INDEX_FILE, CORPUS_FILE, META_FILE):
            if not (root / name).is_file():
                raise FileNotFoundError(f"{root / name}: missing; build the index with parasim.tools.retriever.build")
        self.meta = IndexMeta(**json.loads((root / META_FILE).read_text(encoding="utf-8")))
        self.index = faiss.read_index(str(root / INDEX_FILE))
        self._offsets = _line_offsets(root / CORPUS_FILE)
        if self.index.ntotal != len(self) or len(self) != self.meta.count:
            raise ValueError(f"{root}: index holds {self.index.ntotal} vectors but the corpus {len(self)} "
                             f"documents (meta says {self.meta.count}); rebuild it")
        self._fd = os.open(root / CORPUS_FILE, os.O_RDONLY)
        self.encoder = encoder or Encoder(model_path or self.meta.model, query_prefix=self.meta.query_prefix,
                                          passage_prefix=self.meta.passage_prefix,
                                          max_length=self.meta.max_length, device=device)
        if self.encoder.dim != self.meta.dim:
            raise ValueError(f"encoder dimension {self.encoder.dim} != index dimension {self.meta.dim}")

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __del__(self) -> None:
        fd = getattr(self, "_fd", None)
        if fd is not None:
            os.close(fd)

    def doc(self, i: int) -> dict[str, Any]:
        """Document ``i`` of the corpus (index order)."""
        start, end = int(self._offsets[i]), int(self._offsets[i + 1])
        return json.loads(os.pread(self._fd, end - start, start))

    def search(self, queries: Sequence[str], topk: int) -> tuple[list[list[dict[str, Any]]], list[list[float]]]:
        """Top-``topk`` documents per query (fewer when the corpus is smaller) and their scores."""
        if not queries:
            return [], []
        k = min(topk, len(self))
        scores, ids = self.index.search(self.encoder.queries(queries), k)
        docs = [[self.doc(int(i)) for i in row if i >= 0] for row in ids]
        return docs, [[float(s) for s, i in zip(srow, irow) if i >= 0] for srow, irow in zip(scores, ids)]


def _line_offsets(path: Path) -> np.ndarray:
    """Byte offset of every line start, plus the end of the file: line i is [off[i], off[i+1])."""
    offsets = [0]
    with open(path, "rb") as f:
        for line in f:
            offsets.append(offsets[-1] + len(line))
    return np.asarray(offsets, dtype=np.int64)
