"""``python -m torchneuron <command>``: a thin dispatcher; each command lives in its module."""
from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    """Parses the command line and runs the chosen command; returns its exit status."""
    parser = argparse.ArgumentParser(prog="python -m torchneuron")
    commands = parser.add_subparsers(dest="command", required=True)
    from .sweep import cli as sweep_cli

    sweep_cli.add_commands(commands)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
