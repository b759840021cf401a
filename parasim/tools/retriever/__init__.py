"""The ``search`` tool: a dense retriever (sentence-transformers + FAISS) behind Search-R1's HTTP API.

``build`` writes an index directory from a JSONL corpus, ``serve`` runs the FastAPI service over it,
``client`` is what the real-tools backend calls. Modules import their heavy dependencies themselves.
"""
