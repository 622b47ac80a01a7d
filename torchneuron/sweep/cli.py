"""The ``sweep`` and ``report`` commands of ``python -m torchneuron``."""
from __future__ import annotations

import sys

DEFAULT_RESULTS = "sweep/results.json"
DEFAULT_REPORT = "sweep/report.html"


def add_commands(commands) -> None:
    """Adds ``sweep`` and ``report`` to an argparse subparsers object."""
    p = commands.add_parser("sweep", help="run models through load/forward/backward/compile on neuron",
                            description="Runs each model in its own subprocess with a time limit; "
                                        "the results file is resumable (models in it are skipped).")
    p.add_argument("--suite", choices=["transformers", "timm", "all"], default="all")
    p.add_argument("--limit", type=_at_least(0, int), default=None, help="first N models of each suite")
    p.add_argument("--jobs", type=_at_least(1, int), default=1, help="models run at a time")
    p.add_argument("--timeout", type=_at_least(0, float), default=600.0, help="seconds per model")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", action="append", help="run only this model (repeatable), e.g. timm/resnet18")
    p.add_argument("--out", default=DEFAULT_RESULTS, help="results file (JSON)")
    p.add_argument("--report", default=DEFAULT_REPORT, help="HTML page rendered at the end ('' for none)")
    p.set_defaults(func=_sweep)

    r = commands.add_parser("report", help="render the sweep's results file as an HTML page")
    r.add_argument("--results", default=DEFAULT_RESULTS)
    r.add_argument("--out", default=DEFAULT_REPORT)
    r.set_defaults(func=_report)


def _at_least(low, kind):
    """An argparse type: `kind` of the argument, refused (argparse's usage error) below
    `low`."""
    import argparse

    def parse(text):
        value = kind(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {text}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its "invalid int value" error
    return parse


def _sweep(args) -> int:
    from . import report, runner

    try:
        results = runner.sweep(args.suite, args.limit, args.jobs, args.out, args.timeout, args.seed,
                               names=args.model, command=" ".join(["python -m torchneuron", *sys.argv[1:]]))
    except runner.SweepError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # The runner killed its workers; every finished model is in the file.
        print(f"\ninterrupted: finished models are saved in {args.out}; "
              "the same command continues the sweep", file=sys.stderr)
        return 130
    if args.report:
        report.render(results, args.report)
    print(report.text_summary(results))
    return 0


def _report(args) -> int:
    from . import report, runner

    try:
        results = runner.load(args.results, missing_ok=False)
    except runner.SweepError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    report.render(results, args.out)
    print(report.text_summary(results))
    print(f"wrote {args.out}")
    return 0
