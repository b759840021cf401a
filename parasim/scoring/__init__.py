"""The reward core's Python side: the trajectory batch and its schema, reward configs and presets, advantages,
token masks, and the plain NumPy reference every C++ kernel is tested against."""
