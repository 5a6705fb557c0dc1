"""Command line: `infradrill` (the TUI), list, solve, check, stats, progress export/import.

Bad input: one line, exit 2."""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

TYPE_CHECKING = False  # typing.TYPE_CHECKING as mypy reads it, without importing typing (a few ms of `list`)
if TYPE_CHECKING:
    from typing import NoReturn

    from practice.store import ProgressStore
    from solvers.bank import Bank
    from solvers.data import Catalog
    from solvers.engine import Solution, VariantCode
    from solvers.export import ExportFile

USAGE_ERROR = 2
MAX_EXPORT_COUNT = 200  # variants per question in one export: beyond it, run it again with another --seed
SOLVE_SECONDS = 10  # a variant solves in milliseconds: one that takes this long is stopped, not waited for


def _fail(message: str) -> NoReturn:
    # One line, whatever the user typed into it: a newline, ESC or a bidi override in an id is shown escaped.
    print("infradrill: " + "".join(c if c.isprintable() else ascii(c)[1:-1] for c in message), file=sys.stderr)
    raise SystemExit(USAGE_ERROR)


@contextmanager
def _whole_files(targets: list[Path]) -> Iterator[list[Path]]:
    """Temporary names to write the targets under, renamed to them once the block has written them
    all: never a half-written file under a real name. A full disk, an error or Ctrl+C mid-way leaves
    neither the targets nor the temporary files."""
    partials = [target.with_name(f".{target.name}.partial") for target in targets]
    try:
        yield partials
        for partial, target in zip(partials, targets):
            os.replace(partial, target)
    except BaseException as error:
        for partial in partials:
            with suppress(OSError):  # never made (a read-only directory, a name too long): nothing to clean
                partial.unlink(missing_ok=True)
        if isinstance(error, OSError):
            _fail(f"cannot write {', '.join(map(str, targets))}: {error.strerror or error}")
        raise


def _nameable(path: Path) -> Path:
    """`path`, after a one-line failure where the file system refuses the name itself (a name
    past 255 bytes, a component that is a file)."""
    try:
        path.exists()
    except OSError as error:
        _fail(f"cannot write {path}: {error.strerror or error}")
    return path


def _write_whole(target: Path, text: str) -> None:
    with _whole_files([target]) as (partial,):
        partial.write_text(text, encoding="utf-8")


@contextmanager
def _progress(label: str, *, after: float = 1.0,
              clock: Callable[[], float] = time.monotonic) -> Iterator[Callable[[int, int], None]]:
    """A progress bar on standard error for work that runs past `after` seconds; silent when
    standard error is not a terminal (a pipe, a log, a test)."""
    if not sys.stderr.isatty():
        yield lambda done, total: None
        return
    from rich.console import Console
    from rich.progress import Progress

    started = clock()
    # Nothing redirected: a sheet streamed to standard output goes there, not through the bar's console.
    bar = Progress(console=Console(file=sys.stderr), transient=True, redirect_stdout=False, redirect_stderr=False)
    task = None

    def update(done: int, total: int) -> None:
        nonlocal task
        if task is None:
            if clock() - started < after:
                return
            bar.start()
            task = bar.add_task(label, total=total)
        bar.update(task, completed=done)

    try:
        yield update
    finally:
        if task is not None:
            bar.stop()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("infradrill")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def _stop_slow_solve(_signum: int, _frame: object) -> NoReturn:
    _fail(f"solving this variant took over {SOLVE_SECONDS} s and was stopped (its overrides are probably "
          "far from any real system)")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line instead of usage + traceback-like noise
        _fail(f"{message} (see `{self.prog} --help`)" if " " in self.prog else message)


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="infradrill", description="Drill LLM inference and AI infrastructure interview questions.")
    parser.add_argument("--version", action="store_true", help="show the version and exit")
    parser.add_argument("--data-dir", metavar="DIR",
                        help="where progress is kept (default: $INFRADRILL_DATA_DIR, else the user data directory)")
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
            sub.add_argument("--json", action="store_true", help="machine-readable grades")
    stats = commands.add_parser("stats", help="a summary of your progress")
    stats.add_argument("--json", action="store_true", help="machine-readable output")
    progress = commands.add_parser("progress", help="move progress between machines (JSON), or check it")
    moves = progress.add_subparsers(dest="action", metavar="{export,import,check}", parser_class=_Parser,
                                    required=True)
    export = moves.add_parser("export", help="write all progress to FILE ('-': standard output)")
    export.add_argument("file", metavar="FILE")
    export.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    merge = moves.add_parser("import", help="merge progress from FILE ('-': standard input); never duplicates")
    merge.add_argument("file", metavar="FILE")
    moves.add_parser("check", help="check the progress store and repair what it can (damaged rows are removed, "
                                   "a file that is not a store is moved aside)")
    sheet = commands.add_parser("export", help="variant sheets with answer keys for interviewers")
    sheet.add_argument("ids", nargs="*", metavar="ID", help="questions to include (default: all that match)")
    sheet.add_argument("--group", help="only this group (F, S, K1, T...)")
    sheet.add_argument("--topic", help="only this topic")
    sheet.add_argument("--difficulty", type=int, help="only this difficulty")
    sheet.add_argument("--count", type=int, default=3, help="variants per question (default 3)")
    sheet.add_argument("--seed", type=int, help="first seed: each question's variants are seeds S, S+1, ... "
                                                "(default: a random one, so that a candidate cannot look the "
                                                "variants up from their codes)")
    sheet.add_argument("--format", choices=("markdown", "json", "anki"), default="markdown")
    sheet.add_argument("--out", default="infradrill-sheet",
                       help="markdown: OUT-candidate.md and OUT-key.md; json: OUT.json; anki: OUT.apkg "
                            "(default infradrill-sheet); '-' writes JSON or the answer key's Markdown to "
                            "standard output")
    sheet.add_argument("--force", action="store_true", help="overwrite existing files")
    new = commands.add_parser("new", help="start a question: its file, solver and test, from a working template")
    new.add_argument("spec", metavar="GROUP/ID", help="e.g. F/prefill-time")
    new.add_argument("--topic", required=True, help="its topic (kv-cache, serving, ...): the folder of its solver")
    new.add_argument("--title", help="its title (default: from the id)")
    check = commands.add_parser("validate", help="check question files (default: the whole bank)")
    check.add_argument("paths", nargs="*", metavar="PATH", help="question files or folders")
    check.add_argument("--seeds", type=int, default=50, help="random variants solved per question (default 50)")
    check.add_argument("--options", action="store_true",
                       help="also list select options whose truth is the same in every draw, declared facts "
                            "marked (on standard error)")
    check.add_argument("--strict", action="store_true",
                       help="the interview-grade bar: no graded answer the same in every draw, no select option "
                            "that never varies unless the solver declares it a fact; an old-shape file's prompt of "
                            "at most 8 lines at 78 columns and a follow-up round; a staged file's stages short "
                            "(4 lines to open, 3 after, 4 answers each), pushes that cross and that realism "
                            "accepts, and the variety sweep over 200 draws")
    check.add_argument("--variety", action="store_true",
                       help="also report the variety sweep over 200 draws of every file (on standard error): "
                            "constant options, few-valued numbers, answers mostly zero or a parameter, knife "
                            "edges, too few variants")
    return parser


def _load(question_id: str | None = None) -> tuple[Bank, Catalog]:
    """The bank (or only one question and what it requires) and the data, warnings printed."""
    from solvers.bank import load_bank, load_question
    from solvers.data import load_catalog

    bank = load_bank() if question_id is None else load_question(question_id)
    catalog = load_catalog()
    for problem in bank.problems + catalog.problems:
        print(f"infradrill: warning: {problem}", file=sys.stderr)
    return bank, catalog


def _code(args: argparse.Namespace, require_seed: bool) -> VariantCode:
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


def _variant(args: argparse.Namespace, require_seed: bool) -> tuple[Solution, Catalog]:
    """The variant the arguments name, and the catalogue it was drawn from (a push draws on it too)."""
    from solvers.engine import VariantError, make_variant

    code = _code(args, require_seed)
    bank, catalog = _load(code.question_id)
    if hasattr(signal, "SIGALRM"):  # armed after the load: a cold bank on a busy machine is no slow solve
        signal.signal(signal.SIGALRM, _stop_slow_solve)
        signal.alarm(SOLVE_SECONDS)  # main() disarms it; it covers the pushes `solve --json` solves too
    try:
        return make_variant(bank, catalog, code), catalog
    except VariantError as error:
        _fail(str(error))


def cmd_list(args: argparse.Namespace) -> int:
    from solvers.bankindex import bank_listing

    listed, problems = bank_listing()  # the kept listing while no file changed: no YAML, no parser
    for problem in problems:
        print(f"infradrill: warning: {problem}", file=sys.stderr)
    questions = listed  # in learning order (groups.yaml), as browse lists them
    if args.json:
        print(json.dumps(questions, indent=2))
        return 0
    width = max((len(str(q["id"])) for q in questions), default=2)
    topic_width = max((len(str(q["topic"])) for q in questions), default=5)
    for q in questions:
        print(f"{q['group']:<3} {q['id']:<{width}}  {q['topic']:<{topic_width}}  {q['title']}")
    return 0


def cmd_solve(args: argparse.Namespace) -> int:
    from solvers.report import to_dict, to_markdown, to_text

    solution, catalog = _variant(args, require_seed=False)
    if args.json or args.markdown:  # for scripts and interviewers: the whole interview, its pushes solved
        from solvers.script import script

        staged = script(solution, catalog)
        print(json.dumps(to_dict(solution, staged), indent=2) if args.json else to_markdown(solution, staged),
              end="\n" if args.json else "")
    else:
        print(to_text(solution), end="")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from solvers.report import grade_rows

    solution, _ = _variant(args, require_seed=True)
    keys = [a.key for a in solution.question.answers]
    answers = {}
    for item in args.answers:
        key, sep, text = item.partition("=")
        if not sep:
            _fail(f"answers look like KEY=ANSWER, got '{item}'")
        if key not in keys:
            _fail(f"{solution.question.id} has no answer '{key}' (it has: {', '.join(keys)})")
        if key in answers:  # which one to grade would be a guess
            _fail(f"answer '{key}' is given twice")
        answers[key] = text
    grades = solution.grade(answers)
    if args.json:
        print(json.dumps({"code": str(solution.code), "correct": all(g.correct for g in grades),
                          "answers": [{"key": key, "typed": typed, "expected": expected, "error": error,
                                       "verdict": verdict, "note": note}
                                      for key, (_, typed, expected, error, verdict, note)
                                      in zip((g.key for g in grades), grade_rows(solution, grades))]}, indent=2))
        return 0 if all(g.correct for g in grades) else 1
    rows = [("answer", "yours", "expected", "error", "verdict", "note"), *grade_rows(solution, grades)]
    widths = [max(len(row[i]) for row in rows) for i in range(6)]
    print(f"{solution.question.title}  [{solution.code}]")
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    return 0 if all(g.correct for g in grades) else 1


def _store(args: argparse.Namespace, read_only: bool = False) -> ProgressStore:
    from practice.schema import StoreError, store_path
    from practice.store import ProgressStore

    try:
        path = store_path(args.data_dir)
        store, notices = ProgressStore.open_to_read(path) if read_only else ProgressStore.open(path)
    except StoreError as error:
        _fail(str(error))
    for notice in notices:
        print(f"infradrill: warning: {notice}", file=sys.stderr)
    return store


def cmd_stats(args: argparse.Namespace) -> int:
    from practice.records import now_utc
    from practice.review import Reviewer, ReviewSettings
    from practice.stats import format_summary, summarize_progress, summary_dict
    from solvers.bank import load_bank

    bank = load_bank()
    for problem in bank.problems:
        print(f"infradrill: warning: {problem}", file=sys.stderr)
    with _store(args, read_only=True) as store:
        settings, problems = ReviewSettings.load(store)
        for problem in problems:
            print(f"infradrill: warning: {problem}", file=sys.stderr)
        reviewer = Reviewer(store, bank.questions.values(), settings)
        summary = summarize_progress(reviewer, bank.questions, now_utc())
        if args.json:
            print(json.dumps(summary_dict(summary), indent=2))
        else:
            print(f"Progress in {store.path}")
            print(format_summary(summary), end="")
    return 0


def cmd_progress(args: argparse.Namespace) -> int:
    return {"export": _export, "import": _import, "check": _check_store}[args.action](args)


def _check_store(args: argparse.Namespace) -> int:
    """Opening runs the checks (integrity, schema, every row readable) and the repairs: say what it found."""
    with _store(args) as store:
        attempts, reviews = store.attempt_count(), len(store.reviews())
        path = store.path
    print(f"{path}: checked, {attempts} attempt(s) and {reviews} review(s) readable")
    return 0


def _export(args: argparse.Namespace) -> int:
    from pathlib import Path

    from practice.transfer import export_progress

    target = None if args.file == "-" else _nameable(Path(args.file))
    if target is not None and target.exists() and not args.force:
        _fail(f"{target} exists; use --force to overwrite it")
    if target is not None and not target.parent.is_dir():
        _fail(f"cannot write {target}: no directory {target.parent}")
    with _store(args, read_only=True) as store:
        data = export_progress(store)
    text = json.dumps(data, indent=1) + "\n"
    if target is None:
        sys.stdout.write(text)
        return 0
    _write_whole(target, text)
    print(f"exported {len(data['attempts'])} attempt(s), {len(data['reviews'])} review(s), "
          f"{len(data['cards'])} card(s), {len(data['mocks'])} mock interview(s) and {len(data['holds'])} "
          f"suspended or buried question(s) to {target}")
    return 0


def _import(args: argparse.Namespace) -> int:
    from pathlib import Path

    from practice.review import ReviewSettings
    from practice.transfer import ProgressFormatError, import_progress

    if args.file == "-" and sys.stdin is None:
        _fail("cannot read - : standard input is closed")
    try:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text(encoding="utf-8")
    except OSError as error:
        _fail(f"cannot read {args.file}: {error.strerror}")
    except UnicodeDecodeError:
        _fail(f"{args.file} is not an infradrill progress export (not text)")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        _fail(f"{args.file} is not an infradrill progress export (not JSON: {error})")
    except ValueError as error:  # an integer past Python's 4,300-digit limit
        _fail(f"{args.file} is not an infradrill progress export ({error})")
    except RecursionError:
        _fail(f"{args.file} is not an infradrill progress export (nested too deeply)")
    with _store(args) as store:
        try:
            # Cards of questions reviewed on both sides are replayed from the merged log.
            result = import_progress(store, data, ReviewSettings.load(store)[0].scheduler())
        except ProgressFormatError as error:
            for problem in error.problems:  # one line per refused record, then the verdict
                print(f"infradrill: {args.file}: {problem}", file=sys.stderr)
            _fail(f"cannot import {args.file}: {error}")
    print(f"imported {args.file}: {result.summary()}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """Candidate sheet + answer key (Markdown), JSON or an Anki deck, each variant written as it is
    solved; never overwrites unless --force."""
    import secrets
    from contextlib import ExitStack, nullcontext
    from pathlib import Path

    from solvers.engine import MAX_SEED
    from solvers.export import (
        Selection,
        SelectionError,
        json_sheet,
        key_sheet,
        select,
        variants,
        write_anki,
        write_sheets,
    )

    if not 1 <= args.count <= MAX_EXPORT_COUNT:
        _fail(f"--count must be between 1 and {MAX_EXPORT_COUNT} variants per question")
    to_stdout = args.out == "-"
    if to_stdout and args.format == "anki":
        _fail("an Anki deck is a file: give --out a file name")
    out = Path(args.out)
    if to_stdout:
        pass
    elif not _nameable(out).name or out.name in (".", "..") or out.is_dir():
        _fail(f"--out '{args.out}' names no file: give a file name such as week-1")
    if not out.parent.is_dir():
        _fail(f"cannot write {out}: no directory {out.parent}")
    bank, catalog = _load()
    # Seeds a candidate holding the sheet cannot guess (1, 2, 3 could be looked up in the app).
    seed = args.seed if args.seed is not None else secrets.randbelow(MAX_SEED - args.count + 2)
    # A sheet scrolling past on the terminal is its own progress: a bar there would break into it.
    quiet = to_stdout and sys.stdout.isatty()
    try:
        with nullcontext(None) if quiet else _progress("Solving variants") as progress:
            questions = select(bank, Selection(tuple(args.ids), args.group, args.topic, args.difficulty))
            made = variants(bank, catalog, questions, args.count, seed, progress)  # each with its script, as written
            if to_stdout:
                write_sheets(made, [(json_sheet() if args.format == "json" else key_sheet(), sys.stdout)])
                return 0
            targets, sheets = _export_files(args.format, out, args.force)
            with _whole_files(targets) as partials:
                if not sheets:
                    write_anki(made, partials[0])
                else:
                    with ExitStack() as files:
                        write_sheets(made, [(sheet, files.enter_context(partial.open("w", encoding="utf-8")))
                                                 for partial, sheet in zip(partials, sheets)])
    except SelectionError as error:  # what the selection names, or a seed no draw of a question is valid from
        _fail(str(error))
    seeds = f"seed {seed}" if args.count == 1 else f"seeds {seed}-{seed + args.count - 1}"
    print(f"{args.count * len(questions)} variant(s) of {len(questions)} question(s), {seeds} of each: "
          f"{', '.join(map(str, targets))}")
    return 0


def _export_files(form: str, out: Path, force: bool) -> tuple[list[Path], list[ExportFile]]:
    """The files an export writes, each a plain file not there yet (or --force), and the sheet of
    each; no sheets for an Anki deck."""
    from solvers.export import candidate_sheet, json_sheet, key_sheet

    base = out.with_suffix("") if out.suffix in (".md", ".json", ".apkg") else out
    if form == "anki":
        targets, sheets = [base.with_name(base.name + ".apkg")], []
    elif form == "json":
        targets, sheets = [base.with_name(base.name + ".json")], [json_sheet()]
    else:
        targets = [base.with_name(base.name + "-candidate.md"), base.with_name(base.name + "-key.md")]
        sheets = [candidate_sheet(), key_sheet()]
    linked = [str(p) for p in targets if _nameable(p).is_symlink()]
    if linked:  # a link (dangling or not) would send the sheet somewhere the user did not name
        _fail(f"{', '.join(linked)} is a symbolic link: give a plain file name")
    others = [str(p) for p in targets if p.exists() and not p.is_file()]
    if others:  # --force replaces a file, never a directory (or a FIFO) that happens to have the name
        _fail(f"{', '.join(others)} exists and is not a file: give another name")
    existing = [str(p) for p in targets if p.exists()]
    if existing and not force:
        _fail(f"{', '.join(existing)} already exists (use --force to overwrite)")
    return targets, sheets


def cmd_validate(args: argparse.Namespace) -> int:
    """One line per problem (file, field, what); exit 1 if there are any."""
    from pathlib import Path

    from solvers.data import load_catalog
    from solvers.paths import questions_dir
    from solvers.validate import (
        PROMPT_LINES,
        PROMPT_WIDTH,
        constant_options,
        constraint_report,
        old_shape,
        prompt_report,
        question_files,
        read_questions,
        unmeasured,
        validate_bank,
        variety_report,
    )
    from solvers.variety import DRAWS, KINDS

    if args.seeds < 0:
        _fail("--seeds must be zero or more")
    paths = [Path(p) for p in args.paths] or [questions_dir()]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        _fail(f"no such file or folder: {', '.join(missing)}")
    if not question_files(paths):  # nothing checked is not a pass
        _fail(f"no question files (*.yaml) in {', '.join(map(str, paths))}")
    catalog = load_catalog()
    bank, unread = read_questions(paths)
    problems = catalog.problems + unread + validate_bank(bank, catalog, seeds=args.seeds, strict=args.strict)
    rates, refusing = constraint_report(bank, catalog)
    problems += refusing
    # --strict measures every variant's prompt in the self-test; without it, the default's is a notice.
    long = [] if args.strict else [f"{path}: prompt: {lines} lines at {PROMPT_WIDTH} columns (at most {PROMPT_LINES})"
                                   for path, lines in prompt_report(bank, catalog)]
    for problem in problems:
        print(problem)
    count = len(question_files(paths))
    if long:
        print(f"{len(long)} default prompt(s) over {PROMPT_LINES} lines at {PROMPT_WIDTH} columns "
              "(problems under --strict, which measures every variant):", file=sys.stderr)
        for line in long:
            print(f"  {line}", file=sys.stderr)
    if rates:
        print("Realism constraints (share of raw draws each refuses; the sampler redraws):", file=sys.stderr)
        for line in rates:
            print(f"  {line}", file=sys.stderr)
    if args.options:
        constant = [line for q in bank.questions.values()
                    for line in constant_options(q, bank, catalog, args.seeds)]
        print(f"Select options with the same truth in every draw that shows them ({len(constant)}; declared "
              "facts, or judgement that does not follow from the variant, which --strict fails):", file=sys.stderr)
        for line in constant:
            print(f"  {line}", file=sys.stderr)
    if args.variety:
        found, counts = variety_report(bank, catalog)
        tally = ", ".join(f"{counts[kind]} {said}" for kind, said in KINDS.items())
        print(f"Variety over {DRAWS} draws ({tally}; --strict fails a staged file's):", file=sys.stderr)
        for line in found:
            print(f"  {line}", file=sys.stderr)
    if shaped := old_shape(bank):
        print(f"{len(shaped)} file(s) in the old shape (no stages: every answer asked at once, then the engine's "
              "push; a note, not a problem):", file=sys.stderr)
        for path in shaped:
            print(f"  {path}", file=sys.stderr)
    if missing := unmeasured(bank):
        print(f"{len(missing)} file(s) predict a time or a rate with no published measurement beside it "
              "(reality:; a note, not a problem):", file=sys.stderr)
        for path in missing:
            print(f"  {path}", file=sys.stderr)
    print(f"{count} question file(s), {len(problems)} problem(s)", file=sys.stderr)
    return 1 if problems else 0


def cmd_new(args: argparse.Namespace) -> int:
    from solvers.scaffold import ScaffoldError, parse_request, write

    try:
        written = write(parse_request(args.spec, args.topic, args.title))
    except ScaffoldError as error:
        _fail(str(error))
    for path in written:
        print(f"wrote {path}")
    question = written[-3]
    print(f"next: edit them into your question, and keep `infradrill validate --strict {question}` and "
          f"`pytest {written[-1]}` passing")
    return 0


def main(argv: list[str] | None = None) -> int:
    args, extra = _build_parser().parse_known_args(argv)
    if args.version:  # looked up only when asked for: it reads every package's metadata (~35 ms of CPU)
        if args.command or extra:  # `--version junk` is a typo, not a request for the version
            _fail(f"--version takes nothing else, got: {' '.join([args.command or '', *extra]).strip()}")
        print(f"infradrill {_version()}")
        return 0
    # Answers may follow --seed/--default; argparse leaves them unclaimed.
    if args.command == "check" and all(not item.startswith("-") for item in extra):
        args.answers += extra
    elif extra:
        _fail(f"unrecognized arguments: {' '.join(extra)}")
    if args.command is None:
        if not (sys.stdin.isatty() and sys.stdout.isatty()) or os.environ.get("TERM", "") in ("", "dumb"):
            print("infradrill: the app needs an interactive terminal; the command-line tools work anywhere "
                  "(infradrill --help)", file=sys.stderr)
            return 2
        from tui.app import run

        if args.data_dir:  # the app finds its store through practice.store.data_dir()
            os.environ["INFRADRILL_DATA_DIR"] = args.data_dir
        return run()
    handlers = {"list": cmd_list, "solve": cmd_solve, "check": cmd_check, "stats": cmd_stats,
                "progress": cmd_progress, "validate": cmd_validate, "export": cmd_export, "new": cmd_new}
    try:
        return handlers[args.command](args)
    except BrokenPipeError:  # `infradrill list | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 0
    except KeyboardInterrupt:  # Ctrl+C: what was being written is already cleaned up
        print("infradrill: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # a bug, not bad input: one line, the traceback on request
        if os.environ.get("INFRADRILL_DEBUG"):
            raise
        print(f"infradrill: internal error: {type(error).__name__}: {error} "
              "(set INFRADRILL_DEBUG=1 for the traceback)", file=sys.stderr)
        return 1
    finally:
        if hasattr(signal, "SIGALRM"):
            signal.alarm(0)  # main() may be called again in this process (tests): no stray alarm


if __name__ == "__main__":
    sys.exit(main())
