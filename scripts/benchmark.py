"""`make bench`: every speed figure of the app next to its target, measured in one run. Not part
of `make test`. Ratios are against an anchor measured in the same run, so they hold on a slower
or busier machine; each line says MISS where a figure is over its target.

Targets: first paint within 1.3x of a bare Textual app; the first question after pressing `r`
within 1.5x of that bare paint plus importing and loading the engine plus one variant's solve
and render (the engine loads after the first paint, so a key pressed at once waits for it); `solve` within 1.3x of
importing sympy, numpy and yaml, `list` within 1.5x of importing yaml (CPU time, whole
processes); a bank of 1,000 files loaded warm within 2x of the shipped bank's cold load; solve +
render p95 below 20 ms per question; a follow-up search p95 below 50 ms; a stage's submit until the next
stage is on screen p95 at most 50 ms for every question (a push is solved in a worker while the stage
before it is answered: its time is shown beside, against the 5 s a candidate takes at least); a what-if step
(the variant re-solved and its chart swept) below 33 ms; an export of every question x 100
variants within 30 s of CPU, its peak RSS within 1.5x of a process that solved and wrote one
variant of each question; the app's peak RSS below 150 MB. Every measured process but the export runs once unmeasured
first, and all of them with compiled bytecode kept, as an installed app has it.
"""
from __future__ import annotations

import atexit
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PAINT_RUNS = 7
SEEDS = 40

# Each child measures from its first line until its first screen has been painted, then exits.
BARE = """
import time
start = time.perf_counter()
import json
from textual.app import App
from textual.screen import Screen
from textual.widgets import Static

class Hello(Screen):
    def compose(self):
        yield Static("hello")

    def on_mount(self):
        self.call_after_refresh(self.app.painted)

class Bare(App):
    def on_mount(self):
        self.push_screen(Hello())

    def painted(self):
        self.elapsed = time.perf_counter() - start
        self.exit()

app = Bare()
app.run(headless=True, size=(80, 24))
print(json.dumps({"paint": app.elapsed}))
"""
APP = """
import time
start = time.perf_counter()
import json
from tui.app import InfradrillApp

class Timed(InfradrillApp):
    def after_first_paint(self):  # the hook the home screen calls once painted
        self.elapsed = time.perf_counter() - start
        self.exit()

app = Timed()
app.run(headless=True, size=(80, 24))
print(json.dumps({"paint": app.elapsed}))
"""

# A child's peak RSS in kB, for the children that measure their memory.
_PEAK_RSS = """
import resource

def peak_rss_kb():
    # Linux keeps ru_maxrss across exec, so a child started from a big process would report the parent's
    # peak: the memory map's own high-water mark (VmHWM) starts afresh with the new program.
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
"""

# The app after it has loaded the bank and the engine and solved one variant: its memory.
_LOADED = _PEAK_RSS + """
import asyncio, json
from tui.app import InfradrillApp
from tui.screens.question import QuestionScreen

async def main():
    app = InfradrillApp()
    async with app.run_test(size=(80, 24)) as pilot:
        while app.session is None:
            await pilot.pause(0.05)
        app.open_question("weight-read-intensity")
        while not (isinstance(app.screen, QuestionScreen) and app.screen.query("AnswerField Input")):
            await pilot.pause(0.05)
        await pilot.pause(0.2)
    print(json.dumps({"rss_kb": peak_rss_kb()}))

asyncio.run(main())
"""

# An export's memory, and its anchor: what any export holds before it writes a variant (the engine, the
# bank, every question's solver imported, one variant of each solved with its pushes and written out). An export that
# streams holds about that; one that kept every solution to the end held 12x.
_EXPORT = _PEAK_RSS + """
import json, sys
from tui.cli import main
main(sys.argv[1:])
print(json.dumps({"rss_kb": peak_rss_kb()}))
"""
_EXPORT_ANCHOR = _PEAK_RSS + """
import json
from solvers.bank import load_bank
from solvers.data import load_catalog
from solvers.engine import VariantCode, make_variant
from solvers.export import json_sheet
from solvers.script import script

bank, catalog = load_bank(), load_catalog()
for qid in sorted(bank.questions):
    json_sheet().entry(1, script(make_variant(bank, catalog, VariantCode(qid, 0)), catalog))
print(json.dumps({"rss_kb": peak_rss_kb()}))
"""


# From launch to a question on screen, `r` pressed at once (the key waits for the bank to load).
# "On screen" as for first paint: the question screen's first refresh after it mounts. Pilot's
# press returns only once the whole process has idled twice for 20 ms (its test of "settled"),
# which would add 40-90 ms that no user waits for.
_FIRST_QUESTION = """
import time
start = time.perf_counter()
import asyncio, json
from tui.app import InfradrillApp
from tui.screens.question import QuestionScreen

shown = []
mounted = QuestionScreen.on_mount

def on_mount(self):
    mounted(self)
    self.call_after_refresh(lambda: shown.append(time.perf_counter() - start))

QuestionScreen.on_mount = on_mount

async def main():
    app = InfradrillApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("r")
        while not shown:
            await pilot.pause(0.005)
        print(json.dumps({"question": shown[0]}))

asyncio.run(main())
"""


# What the first question needs beside the app: the engine imported, the bank and data loaded.
_ENGINE = """
import time
start = time.perf_counter()
import json
from solvers.bank import load_bank
from solvers.data import load_catalog
import solvers.engine
load_bank(), load_catalog()
print(json.dumps({"engine": time.perf_counter() - start}))
"""


def _measured_env() -> dict[str, str]:
    """The environment of every measured process: bytecode compiled once and kept, as an installed
    app has it (pip compiles on install; a source tree writes __pycache__ on its first run). With
    PYTHONDONTWRITEBYTECODE set (a sandbox that keeps trees clean) each process would compile the
    app's own modules again while the anchors' libraries come compiled from site-packages; their
    bytecode then goes to a scratch folder instead of the tree."""
    env = dict(os.environ)
    if env.pop("PYTHONDONTWRITEBYTECODE", None):
        env["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="infradrill-bench-pyc-")
        atexit.register(shutil.rmtree, env["PYTHONPYCACHEPREFIX"], True)
    return env


ENV = _measured_env()
_WARMED: set[tuple[str, ...]] = set()


def _warm(argv: list[str]) -> None:
    """Run a kind of measured process once unmeasured, the first time (bytecode, disk cache)."""
    if tuple(argv) not in _WARMED:
        _WARMED.add(tuple(argv))
        subprocess.run(argv, capture_output=True, env=ENV, check=False)


def child(code: str) -> dict:
    _warm([sys.executable, "-c", code])
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, check=False)
    if result.returncode != 0:
        raise SystemExit(f"benchmark child failed:\n{result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def first_paint() -> tuple[float, float]:
    bare = [child(BARE)["paint"] for _ in range(PAINT_RUNS)]
    app = [child(APP)["paint"] for _ in range(PAINT_RUNS)]
    return statistics.median(bare), statistics.median(app)


def _loaded_as_the_app_loads():
    """The bank and the catalog, and then what is alive frozen, as the app freezes its heap after its load
    (tui/app.py, _load): a collection walks what the measured work makes, not the bank and the solves before it
    (one full collection over this process's heap is ~100 ms of CPU, the follow-up line's worst sample once)."""
    import gc

    from solvers.bank import load_bank
    from solvers.data import load_catalog

    bank, catalog = load_bank(), load_catalog()
    gc.collect()
    gc.freeze()
    return bank, catalog


def solve_times() -> dict[str, list[float]]:
    from solvers.engine import VariantCode, make_variant
    from solvers.report import to_text
    from tui.render import regime_panel, step_renderable

    bank, catalog = _loaded_as_the_app_loads()
    make_variant(bank, catalog, VariantCode(next(iter(bank.questions)), 0))  # first sympy printing is slow once
    times: dict[str, list[float]] = {}
    for qid in sorted(bank.questions):
        samples = []
        for seed in range(SEEDS):
            start = time.perf_counter()
            solution = make_variant(bank, catalog, VariantCode(qid, seed))
            to_text(solution)
            [step_renderable(i, s) for i, s in enumerate(solution.sheet.steps, 1)]
            if solution.sheet.regime is not None:
                regime_panel(solution)
            samples.append(time.perf_counter() - start)
        times[qid] = samples
    return times


FOLLOWUP_SEEDS = 10


def followup_times() -> dict[str, list[float]]:
    """Finding the follow-up of a variant (a sweep of solves), for every question with a regime."""
    from solvers.engine import VariantCode, make_variant
    from solvers.followup import follow_up

    bank, catalog = _loaded_as_the_app_loads()
    times: dict[str, list[float]] = {}
    for qid in sorted(q.id for q in bank.questions.values() if q.regime_sides):
        samples = []
        for seed in range(FOLLOWUP_SEEDS):
            solution = make_variant(bank, catalog, VariantCode(qid, seed))
            start = time.perf_counter()
            follow_up(solution, catalog)
            samples.append(time.perf_counter() - start)
        times[qid] = samples
    return times


STAGE_SEEDS = 10


def stage_times() -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """What the question screen does on the submit of a stage that is not the last: grade it, line up its keys
    with their why, and build the next stage, unless that is a push, which a worker solved while this stage was
    answered. And those pushes' own search and solve, apart. The answers graded are the keys typed back."""
    from solvers.engine import VariantCode, make_variant
    from solvers.interview import opening, stage_run
    from solvers.report import typed_key

    bank, catalog = _loaded_as_the_app_loads()
    submits: dict[str, list[float]] = {}
    pushes: dict[str, list[float]] = {}
    for qid in sorted(bank.questions):
        submits[qid], pushes[qid] = [], []
        for seed in range(STAGE_SEEDS):
            solution = make_variant(bank, catalog, VariantCode(qid, seed))
            stages = solution.question.stages
            ready = {}
            for index in (i for i, stage in enumerate(stages) if stage.push):
                start = time.perf_counter()
                ready[index] = stage_run(solution, catalog, index)
                pushes[qid].append(time.perf_counter() - start)
            current, index = opening(solution), 1
            while current is not None and index < len(stages):
                typed = {key: typed_key(current.solution, key) for key in current.ask}
                start = time.perf_counter()
                current.grade(typed)
                current.key_lines()
                following = None
                while following is None and index < len(stages):  # a push that found nothing is passed over
                    following = ready[index] if stages[index].push else stage_run(solution, catalog, index)
                    index += 1
                submits[qid].append(time.perf_counter() - start)
                current = following
    return submits, pushes


def p95(samples: list[float]) -> float:
    return sorted(samples)[max(0, int(round(0.95 * len(samples))) - 1)]


def whatif_times() -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """One step of the what-if explorer, as the screen takes it for each key press: the variant re-solved with
    the chart's parameter moved, and the chart swept again over that parameter (32 points), with the points
    the screen's first sweep (on opening) already solved. And that first sweep, cold: what opening the
    screen, or selecting another parameter, costs."""
    from solvers.engine import VariantCode, make_variant, revise, sweep

    bank, catalog = _loaded_as_the_app_loads()
    steps: dict[str, list[float]] = {}
    cold: dict[str, list[float]] = {}
    for qid in sorted(q.id for q in bank.questions.values() if q.chart):
        question = bank.questions[qid]
        parameter, answer = question.chart
        steps[qid], cold[qid] = [], []
        for seed in range(5):
            solution = make_variant(bank, catalog, VariantCode(qid, seed))
            values = sorted(question.parameter(parameter).grid(8) - {solution.param(parameter).raw})
            swept: dict = {}  # the screen's memo of chart points
            start = time.perf_counter()
            sweep(solution, catalog, parameter, answer, points=32, solved=swept)
            cold[qid].append(time.perf_counter() - start)
            start = time.perf_counter()
            try:
                moved = revise(solution, catalog, {parameter: values[len(values) // 2]})
            except Exception:  # a move off the valid set: the screen says so and keeps the variant
                moved = solution
            sweep(moved, catalog, parameter, answer, points=32, solved=swept)
            steps[qid].append(time.perf_counter() - start)
    return steps, cold


CPU_RUNS = 5


def cpu_seconds(argv: list[str], runs: int = CPU_RUNS, warm: bool = True) -> float:
    """User + system CPU of one whole process, median of `runs` (after one unmeasured, with `warm`)."""
    if warm:
        _warm(argv)
    samples = []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(argv, capture_output=True, env=ENV, check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        samples.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(samples)


def command_line() -> dict[str, tuple[float, float]]:
    """(command, anchor) CPU seconds: `solve` against importing what it needs, `list` against yaml."""
    py = sys.executable
    # The command as a user runs it: the console script pip installed (`python -m` would add runpy's import).
    script = Path(py).with_name("infradrill")
    cli = [str(script)] if script.exists() else [py, "-m", "tui.cli"]
    return {
        "solve": (cpu_seconds(cli + ["solve", "kv-bytes-per-token", "--default", "--json"]),
                  cpu_seconds([py, "-c", "import sympy, numpy, yaml"])),
        "list": (cpu_seconds(cli + ["list"]), cpu_seconds([py, "-c", "import yaml"])),
    }


BIG_BANK = 1000


def synthetic_bank(root: Path, size: int) -> None:
    """`size` valid question files: the shipped bank copied again and again, each copy's ids given a
    suffix of their own; the prerequisites they name are those of the first copy, which is whole."""
    from solvers.paths import questions_dir

    files = sorted(questions_dir().glob("**/*.yaml"))
    ids = sorted((f.stem for f in files), key=len, reverse=True)
    pattern = re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, ids)) + r")(?![\w-])")
    made = 0
    for copy in range(size // len(files) + 1):
        for path in files:
            if made == size:
                return
            target = root / path.parent.name / f"{path.stem}-x{copy}.yaml"
            target.parent.mkdir(parents=True, exist_ok=True)
            def renamed(m: re.Match, stem: str = path.stem, copy: int = copy) -> str:
                return m.group(1) + (f"-x{copy}" if m.group(1) == stem else "-x0")

            target.write_text(pattern.sub(renamed, path.read_text()))
            made += 1


def bank_loads() -> dict[str, float]:
    """Seconds to load the shipped bank cold (no cache) and warm, and a 1,000-file bank both ways."""
    from solvers.bank import load_bank
    from solvers.bankcache import QuestionCache
    from solvers.paths import questions_dir

    def timed(root: Path, cache_dir: Path) -> float:
        start = time.perf_counter()
        bank = load_bank(root, QuestionCache(root, cache_dir))
        elapsed = time.perf_counter() - start
        if bank.problems:
            raise SystemExit(f"benchmark bank has problems: {bank.problems[:3]}")
        return elapsed

    with tempfile.TemporaryDirectory() as scratch:
        big = Path(scratch) / "questions"
        synthetic_bank(big, BIG_BANK)
        figures = {}
        for name, root in (("shipped", questions_dir()), ("big", big)):
            cold = []
            for run in range(3):
                cold.append(timed(root, Path(scratch) / f"cache-{name}-{run}"))
            warm = [timed(root, Path(scratch) / f"cache-{name}-0") for _ in range(3)]
            figures[f"{name} cold"], figures[f"{name} warm"] = statistics.median(cold), statistics.median(warm)
        return figures


def export_figures() -> tuple[float, float]:
    """CPU seconds and peak RSS (kB) of one export of every question x 100 variants as JSON."""
    # Not run once before: it takes seconds, of which compiling the modules the others have not is nothing.
    with tempfile.TemporaryDirectory() as scratch:
        argv = [sys.executable, "-c", _EXPORT, "export", "--count", "100", "--format", "json",
                "--out", os.path.join(scratch, "all")]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        result = subprocess.run(argv, capture_output=True, text=True, env=ENV, check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return cpu, json.loads(result.stdout.strip().splitlines()[-1])["rss_kb"]


def verdict(value: float, target: float) -> str:
    return "" if value <= target else "   MISS"


def main() -> int:
    if ENV.get("PYTHONPYCACHEPREFIX") != os.environ.get("PYTHONPYCACHEPREFIX"):
        print("PYTHONDONTWRITEBYTECODE is set: measured processes keep their bytecode in a scratch folder, "
              "as an install would\n")
    bare, app = first_paint()
    print(f"first paint (median of {PAINT_RUNS}, headless 80x24)")
    print(f"  bare Textual app   {bare * 1000:7.1f} ms")
    ratio = app / bare
    print(f"  infradrill         {app * 1000:7.1f} ms   {ratio:.2f}x the bare app  (target <= 1.3x)"
          f"{verdict(ratio, 1.3)}")

    print(f"\nsolve + render per variant ({SEEDS} seeds each)")
    solves = solve_times()
    worst = 0.0
    for qid, samples in solves.items():
        worst = max(worst, p95(samples))
        print(f"  {qid:30s} median {statistics.median(samples) * 1000:6.2f} ms   p95 {p95(samples) * 1000:6.2f} ms")
    print(f"  worst p95 {worst * 1000:.2f} ms  (target < 20 ms){verdict(worst, 0.020)}")

    one_variant = statistics.median(statistics.median(s) for s in solves.values())
    engine = statistics.median(child(_ENGINE)["engine"] for _ in range(PAINT_RUNS))
    question = statistics.median(child(_FIRST_QUESTION)["question"] for _ in range(PAINT_RUNS))
    anchor = bare + engine + one_variant
    print("\nfirst question: launch, `r` pressed at once, until the question is on screen")
    print(f"  {question * 1000:7.1f} ms   {question / anchor:.2f}x the bare paint + the engine's import and "
          f"load + one variant ({bare * 1000:.0f} + {engine * 1000:.0f} + {one_variant * 1000:.0f} ms)  "
          f"(target <= 1.5x){verdict(question / anchor, 1.5)}")

    print(f"\nfollow-up search per variant ({FOLLOWUP_SEEDS} seeds each; runs in a worker after submit)")
    pushes = followup_times()
    slowest = max(pushes, key=lambda q: p95(pushes[q]))
    medians = [statistics.median(v) for v in pushes.values()]
    print(f"  median over questions {statistics.median(medians) * 1000:6.1f} ms   "
          f"worst p95 {p95(pushes[slowest]) * 1000:6.1f} ms ({slowest})  (target < 50 ms)"
          f"{verdict(p95(pushes[slowest]), 0.050)}")

    submits, pushes = stage_times()
    slowest = max(submits, key=lambda q: p95(submits[q]))
    every = [t for v in submits.values() for t in v]
    print(f"\nstage submit until the next stage is on screen ({STAGE_SEEDS} seeds each; a push's own run ready)")
    worst = p95(submits[slowest])
    print(f"  p95 over every submit {p95(every) * 1000:6.1f} ms   worst question's p95 {worst * 1000:6.1f} ms "
          f"({slowest})  (target <= 50 ms){verdict(worst, 0.050)}")
    slowest = max(pushes, key=lambda q: p95(pushes[q]))
    every = [t for v in pushes.values() for t in v]
    print(f"  a push's search and solve, in a worker while the stage before it is answered: p95 "
          f"{p95(every) * 1000:6.1f} ms, worst question's p95 {p95(pushes[slowest]) * 1000:6.1f} ms ({slowest}), "
          f"slowest {max(every) * 1000:.0f} ms  (target < 5 s){verdict(max(every), 5)}")
    steps, cold = whatif_times()
    slowest = max(steps, key=lambda q: p95(steps[q]))
    print("\nwhat-if step (re-solve, then sweep the chart's 32 points again; the screen keeps what it solved)")
    print(f"  median over questions {statistics.median(statistics.median(v) for v in steps.values()) * 1000:6.1f} ms"
          f"   worst p95 {p95(steps[slowest]) * 1000:6.1f} ms ({slowest})  (target < 33 ms)"
          f"{verdict(p95(steps[slowest]), 0.033)}")
    slowest = max(cold, key=lambda q: p95(cold[q]))
    print(f"  first sweep of a parameter (opening, or selecting another): median over questions "
          f"{statistics.median(statistics.median(v) for v in cold.values()) * 1000:6.1f} ms   "
          f"worst p95 {p95(cold[slowest]) * 1000:6.1f} ms ({slowest})")

    print(f"\ncommand line (CPU seconds, median of {CPU_RUNS} whole processes)")
    for name, (command, anchor_cpu) in command_line().items():
        target = 1.3 if name == "solve" else 1.5
        what = "importing sympy, numpy and yaml" if name == "solve" else "importing yaml"
        print(f"  {name:6s} {command:5.2f} s   {command / anchor_cpu:.2f}x {what} ({anchor_cpu:.2f} s)  "
              f"(target <= {target}x){verdict(command / anchor_cpu, target)}")

    loads = bank_loads()
    print("\nbank loading (median of 3; warm = every file unchanged since the last load)")
    print(f"  shipped bank   cold {loads['shipped cold'] * 1000:7.1f} ms   warm {loads['shipped warm'] * 1000:6.1f} ms")
    big_ratio = loads["big warm"] / loads["shipped cold"]
    print(f"  {BIG_BANK:,} files    cold {loads['big cold'] * 1000:7.1f} ms   warm {loads['big warm'] * 1000:6.1f} ms"
          f"   warm = {big_ratio:.2f}x the shipped bank cold  (target <= 2x){verdict(big_ratio, 2)}")

    seconds, export_rss = export_figures()
    anchor_rss = child(_EXPORT_ANCHOR)["rss_kb"]
    print("\nexport of every question x 100 variants as JSON")
    print(f"  {seconds:.1f} s of CPU  (target <= 30 s){verdict(seconds, 30)}")
    print(f"  peak RSS {export_rss / 1024:6.1f} MB   {export_rss / anchor_rss:.2f}x one variant of each question "
          f"solved and written ({anchor_rss / 1024:.1f} MB)  (target <= 1.5x){verdict(export_rss / anchor_rss, 1.5)}")

    solve_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    app_rss = child(_LOADED)["rss_kb"] / 1024
    print("\npeak RSS")
    print(f"  app, bank loaded and one variant open  {app_rss:6.1f} MB  (target < 150 MB){verdict(app_rss, 150)}")
    print(f"  this process after solving every seed  {solve_rss:6.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
