"""Real tools: agent tools on OpenAI-compatible endpoints, the sandbox and retriever as tools, the termination
model, the calibration call log, the real-tools episode engine, and serving the pool with vLLM.

Modules: ``endpoints`` (the endpoint map), ``client`` (async chat calls, failures as statuses), ``prompts``
(agent-tool templates, answer extraction), ``backend`` (a round of calls), ``termination``, ``calllog``,
``tasks`` (question + gold answer files), ``engine`` (``RealEpisodeEngine`` for ParaOrchText-v0),
``serve_pool`` (``parasim serve-pool``), ``vllm_client`` (readiness, weight reloads); the tests' scripted
OpenAI-compatible server is ``tests/fake_server.py``, outside the package. Nothing is imported here, so that
importing one module never pulls another's dependencies.
"""
