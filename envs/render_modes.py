"""The structured envs' render modes, in a module of their own so that the registration can state them to
``gym.make`` (which reads them before it builds an env) without importing the renderer or the envs."""

RENDER_MODES = ("ansi", "rgb_array")
RENDER_FPS = 4  # board frames per second in recorded videos: one manager turn each
