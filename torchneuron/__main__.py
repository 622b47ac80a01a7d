"""The torchneuron command line: ``python -m torchneuron <subcommand>``.

Subcommands (each implemented in its own module):
  coverage   run the OpInfo/ModuleInfo sweeps and write docs/coverage (torchneuron.coverage.report)
"""
from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m torchneuron")
    sub = parser.add_subparsers(dest="command", required=True)
    from .coverage import report

    report.add_arguments(sub.add_parser("coverage", help="operator coverage sweeps and report"))
    args = parser.parse_args(argv)
    args.argv = argv[1:]
    if args.command == "coverage":
        return report.main(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
