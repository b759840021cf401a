"""Training of parasim managers (installed as ``parasim.training``): policies, SFT, GRPO, sweeps."""
