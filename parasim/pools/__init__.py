"""Pools: the models a manager orchestrates and how they are served, as validated tables; pool files and
their overrides; the descriptors a policy reads."""
