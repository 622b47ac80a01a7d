"""``python -m torchneuron <command>``: a thin dispatcher; each command lives in its module.

Commands:
  coverage   the OpInfo/ModuleInfo sweeps and docs/coverage (torchneuron.coverage.report)
  sweep      the model sweep over transformers and timm (torchneuron.sweep.cli)
  report     the model sweep's HTML page (torchneuron.sweep.cli)
"""
from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    """Parses the command line and runs the chosen command; returns its exit status."""
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m torchneuron")
    commands = parser.add_subparsers(dest="command", required=True)
    from .coverage import report
    from .sweep import cli as sweep_cli

    report.add_arguments(commands.add_parser("coverage", help="operator coverage sweeps and report"))
    sweep_cli.add_commands(commands)
    args = parser.parse_args(argv)
    if args.command == "coverage":
        args.argv = argv[1:]
        return report.main(args)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
