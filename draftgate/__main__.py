"""``python -m draftgate`` is the ``draftgate`` command."""

from draftgate.cli.main import main

raise SystemExit(main())
