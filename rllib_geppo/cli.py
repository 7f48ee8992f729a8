"""Command line entry point (placeholder until the CLI lands)."""

import sys


def main(argv=None) -> int:
    print("rllib-geppo: the training command is not built yet.", file=sys.stderr)
    return 2
