"""Subcommands of the ``parasim`` CLI, one module each (see ``parasim.cli``)."""
