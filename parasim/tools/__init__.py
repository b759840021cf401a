"""Real basic tools and answer checking: the ``python`` sandbox, the ``search`` retriever, verifiers.

Submodules are imported where used, so that importing one never pulls another's heavy dependencies
(FAISS, sentence-transformers, math-verify):

- ``parasim.tools.sandbox``: ``Sandbox(SandboxConfig(...))``; ``await sandbox.arun(code, stdin="")``
  returns a ``CallResult`` (OK / EXEC_ERR / TIMEOUT) and ``arun_many`` runs a round's calls at once.
- ``parasim.tools.retriever``: ``build`` (index a JSONL corpus), ``serve`` (Search-R1's
  ``POST /retrieve``), ``client.RetrieverClient(url).search_many(queries)`` -> ``CallResult`` per query.
- ``parasim.tools.verify``: ``verify(response, gold, kind_for(domain, num_options))`` -> ``Verdict``,
  and ``await verify_code(response, tests, sandbox)`` for stdin/stdout programming tasks.
"""
