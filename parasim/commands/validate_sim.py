"""parasim validate-sim: replay logged real-tools episodes in the simulator and compare, per benchmark.

LOGS is per-query eval results (a plain table, an lm-eval --log_samples folder, a lighteval details folder: the
table's joint statistics against the simulator's on the same design, parasim.validation.per_query), or a
directory of real-tools logs (each call log ``X.jsonl`` with its episode log ``X.episodes.jsonl``, as
``parasim.real.calllog.CallLogger`` writes them), or one call or episode log. The pool is --pool, or, without
one, a pool fitted to the logged calls (``parasim calibrate``'s fit, from --base). Every logged episode's round
actions are replayed in --replicas simulated episodes; accuracy, tool-output tokens, cost, USD, latency, status
rates, the agent calls' accuracy and the tool and model shares are compared, with paired bootstrap intervals over
tasks. Prints the table; writes validate_sim.json and validate_sim.png (docs/validate_sim.md).
Exit code 0 when the report is written, whatever it finds; 2 for bad settings or logs (one line naming the file,
line and field).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from parasim.commands import CommandError, check_output


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``validate-sim`` parser: LOGS, then the settings of ``ValidateSimConfig`` as flags (config style)."""
    from parasim.config.fields import arg_parser
    from parasim.validation import ValidateSimConfig

    settings = arg_parser(ValidateSimConfig, "parasim validate-sim")
    p = subparsers.add_parser("validate-sim", help="replay logged real episodes in the simulator and compare",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                              parents=[settings], conflict_handler="resolve", allow_abbrev=False)
    p.add_argument("logs", metavar="LOGS", help="log directory, call log or episode log; or per-query eval results")
    p.add_argument("--all-figures", action="store_true",
                   help="show every figure in the table (tool and model shares too), not only the headline ones")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Build the settings, validate, print and write the report."""
    from parasim.config.fields import ConfigError, build, load_mapping, specs, to_toml
    from parasim.validation import LogError, ValidateSimConfig, is_per_query_input, validate_per_query, validate_sim
    from parasim.validation.report import print_table, write_outputs

    try:
        values = load_mapping(args.config) if args.config else {}
        values.update({s.name: getattr(args, s.name) for s in specs(ValidateSimConfig)
                       if getattr(args, s.name) is not None})
        cfg = build(ValidateSimConfig, values, "validate-sim")
    except (ConfigError, OSError) as err:
        raise CommandError(str(err)) from None
    if args.print_config:
        import dataclasses

        print(to_toml({k: v for k, v in dataclasses.asdict(cfg).items() if v is not None}), end="")
        return 0
    logs = Path(args.logs)
    out = Path(cfg.out) if cfg.out else (logs / "validate_sim" if logs.is_dir() else logs.parent / "validate_sim")
    check_output(out / "validate_sim.json", "--out")  # before the fit and the replay, which a failed write would lose
    if is_per_query_input(logs):
        from parasim.validation.report import print_per_query, write_per_query

        try:
            report = validate_per_query(logs, cfg)
        except (OSError, ValueError) as err:
            raise CommandError(str(err)) from None
        print_per_query(report)
        print(f"wrote {', '.join(map(str, write_per_query(report, out)))}")
        return 0
    try:
        report = validate_sim(args.logs, cfg)
    except (LogError, ValueError) as err:
        raise CommandError(str(err)) from None
    print_table(report, all_figures=args.all_figures)
    paths = write_outputs(report, out)
    print(f"wrote {', '.join(map(str, paths))}")
    return 0
