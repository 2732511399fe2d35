"""The ``draftgate`` command line: one entry point, one module per subcommand."""
