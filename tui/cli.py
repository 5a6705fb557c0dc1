"""Command line: `infradrill` (the TUI), list, solve, check. Bad input: one line, exit 2."""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import NoReturn

USAGE_ERROR = 2


def _fail(message: str) -> NoReturn:
    print(f"infradrill: {message}", file=sys.stderr)
    raise SystemExit(USAGE_ERROR)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line instead of usage + traceback-like noise
        _fail(f"{message} (see `infradrill {self.prog.split()[-1]} --help`)" if " " in self.prog else message)


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="infradrill", description="Drill LLM inference and AI infrastructure interview questions.")
    commands = parser.add_subparsers(dest="command", parser_class=_Parser)
    listing = commands.add_parser("list", help="list the question bank")
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    for name, text in (("solve", "show one variant with its answers, steps and regime"),
                       ("check", "grade answers for one variant; exit 0 only if all are correct")):
        sub = commands.add_parser(name, help=text)
        sub.add_argument("id", help="question id, or a variant code such as kv-bytes-per-token@42")
        pick = sub.add_mutually_exclusive_group()
        pick.add_argument("--seed", type=int, help="draw the variant with this seed")
        pick.add_argument("--default", action="store_true", help="every parameter at its default")
        sub.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="override a parameter")
        if name == "solve":
            form = sub.add_mutually_exclusive_group()
            form.add_argument("--json", action="store_true")
            form.add_argument("--markdown", action="store_true")
        else:
            sub.add_argument("answers", nargs="*", metavar="KEY=ANSWER", help="e.g. kv_per_token='320 KiB'")
    return parser


def _load():
    from solvers.bank import load_bank
    from solvers.data import load_catalog

    bank, catalog = load_bank(), load_catalog()
    for problem in bank.problems + catalog.problems:
        print(f"infradrill: warning: {problem}", file=sys.stderr)
    return bank, catalog


def _code(args: argparse.Namespace, require_seed: bool):
    import random

    from solvers.engine import MAX_SEED, VariantCode, VariantError

    try:
        if "@" in args.id:
            if args.seed is not None or args.default:
                _fail("give either a variant code or --seed/--default, not both")
            base = VariantCode.parse(args.id)
        else:
            if args.seed is None and not args.default and require_seed:
                _fail("check needs --seed N or --default (or a variant code)")
            seed = None if args.default else args.seed if args.seed is not None else random.randint(1, 99_999)
            if seed is not None and not 0 <= seed <= MAX_SEED:
                _fail(f"seed must be between 0 and {MAX_SEED}")
            base = VariantCode(args.id, seed)
    except VariantError as error:
        _fail(str(error))
    sets = []
    for item in args.set:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            _fail(f"--set expects NAME=VALUE, got '{item}'")
        sets.append((name.strip(), value.strip()))
    return VariantCode(base.question_id, base.seed, base.overrides + tuple(sets))


def _variant(args: argparse.Namespace, require_seed: bool):
    from solvers.engine import VariantError, make_variant

    bank, catalog = _load()
    try:
        return make_variant(bank, catalog, _code(args, require_seed))
    except VariantError as error:
        _fail(str(error))


def cmd_list(args: argparse.Namespace) -> int:
    bank, _ = _load()
    questions = sorted(bank.questions.values(), key=lambda q: (q.group, q.id))
    if args.json:
        print(json.dumps([{"id": q.id, "title": q.title, "group": q.group, "topic": q.topic,
                           "difficulty": q.difficulty} for q in questions], indent=2))
        return 0
    width = max((len(q.id) for q in questions), default=2)
    for q in questions:
        print(f"{q.group:<3} {q.id:<{width}}  {q.topic:<10} {q.title}")
    return 0


def cmd_solve(args: argparse.Namespace) -> int:
    from solvers.report import to_dict, to_markdown, to_text

    solution = _variant(args, require_seed=False)
    if args.json:
        print(json.dumps(to_dict(solution), indent=2))
    elif args.markdown:
        print(to_markdown(solution), end="")
    else:
        print(to_text(solution), end="")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from solvers.report import grade_rows

    solution = _variant(args, require_seed=True)
    keys = [a.key for a in solution.question.answers]
    answers = {}
    for item in args.answers:
        key, sep, text = item.partition("=")
        if not sep:
            _fail(f"answers look like KEY=ANSWER, got '{item}'")
        if key not in keys:
            _fail(f"{solution.question.id} has no answer '{key}' (it has: {', '.join(keys)})")
        answers[key] = text
    grades = solution.grade(answers)
    rows = [("answer", "yours", "expected", "error", "verdict", "note"), *grade_rows(solution, grades)]
    widths = [max(len(row[i]) for row in rows) for i in range(6)]
    print(f"{solution.question.title}  [{solution.code}]")
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    return 0 if all(g.correct for g in grades) else 1


def main(argv: list[str] | None = None) -> int:
    args, extra = _build_parser().parse_known_args(argv)
    # Answers may follow --seed/--default; argparse leaves them unclaimed.
    if args.command == "check" and all(not item.startswith("-") for item in extra):
        args.answers += extra
    elif extra:
        _fail(f"unrecognized arguments: {' '.join(extra)}")
    if args.command is None:
        from tui.app import run

        return run()
    handlers = {"list": cmd_list, "solve": cmd_solve, "check": cmd_check}
    try:
        return handlers[args.command](args)
    except Exception as error:  # a bug, not bad input: one line, the traceback on request
        if os.environ.get("INFRADRILL_DEBUG"):
            raise
        print(f"infradrill: internal error: {type(error).__name__}: {error} "
              "(set INFRADRILL_DEBUG=1 for the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
