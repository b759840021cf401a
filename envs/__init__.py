"""Gymnasium environments of parasim, imported as ``parasim.envs`` (``parasim/envs`` links to this folder)."""
