"""Tasks: the benchmark suites an episode's task is drawn from, and users' own task files."""
