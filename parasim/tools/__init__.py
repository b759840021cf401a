"""Real basic tools and answer checking: the ``python`` sandbox, the ``search`` retriever, verifiers.

Submodules are imported where used (``parasim.tools.sandbox``, ``parasim.tools.retriever``,
``parasim.tools.verify``) so that importing one never pulls another's heavy dependencies
(FAISS, sentence-transformers, math-verify).
"""
