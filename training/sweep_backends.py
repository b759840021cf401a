"""The names of the sweep backends and the default one, apart from ``sweep`` so that the CLI's parser can list them
without importing torch and the trainer."""
from __future__ import annotations

BACKENDS = ("population", "local", "ray", "ray-population")
DEFAULT_BACKEND = "population"  # each worker trains its points as one batched population (``population``)
