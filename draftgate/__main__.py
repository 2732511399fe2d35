"""``python -m draftgate`` is the ``draftgate`` command."""

from draftgate.proxy.cli.main import main

raise SystemExit(main())
