"""Trainers, rollouts and sweeps of parasim, imported as ``parasim.training`` (``parasim/training`` links to this
folder)."""
