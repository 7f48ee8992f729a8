"""`python -m rllib_geppo ...`: the same program as the `rllib` and `rllib-geppo` commands."""

from rllib_geppo.cli.main import main

raise SystemExit(main())
