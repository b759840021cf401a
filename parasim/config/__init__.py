"""Declared, validated settings and the readers of input files: config fields, env options, JSON / JSONL."""
