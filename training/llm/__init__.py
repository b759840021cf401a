"""Full-model training of a Hugging Face causal LM manager on ParaOrchText-v0.

One file per algorithm (``sft.py``, ``grpo.py``) with its hyperparameters in a dataclass at the top, read top to
bottom like CleanRL; ``data.py`` holds the trajectory / role-span formats, ``rollout.py`` the generation engines
(HF ``generate`` or a vLLM server) and the multi-turn rollout loop, ``runtime.py`` the plumbing both trainers share
(config, torchrun / FSDP2, token log-probs, atomic checkpoints, JSONL logs).
"""
