"""Gymnasium environments of parasim, installed as ``parasim.envs``."""
