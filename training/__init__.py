"""Trainers, rollouts and sweeps of parasim: the small policy's SFT and GRPO on the simulator, the LLM manager's
trainers (``training.llm``), sweeps and their store. A top-level package over ``envs`` and ``parasim``."""
