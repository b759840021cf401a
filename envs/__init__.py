"""Gymnasium environments of parasim: ParaOrch-v0 (structured), its vector env and ParaOrchText-v0 (text), over
one call source of simulated or real tools. A top-level package beside ``parasim`` (the library) and ``training``."""
