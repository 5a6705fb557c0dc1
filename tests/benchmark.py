"""`make bench`: start-up, solve + render time per question, peak memory. Not part of `make test`.

Targets (Foundation issue): first paint within 1.3x of a bare Textual app; p95 below
20 ms per variant (solve + render); peak RSS below 150 MB. Interview-grade engine: finding
a variant's follow-up (a sweep of solves) below 400 ms at p95, the wait after submitting.
"""
from __future__ import annotations

import json
import resource
import statistics
import subprocess
import sys
import time

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

# The app after it has loaded the bank and the engine and solved one variant: its memory.
_LOADED = """
import asyncio, json, resource
from tui.app import InfradrillApp
from tui.screens.question import QuestionScreen

async def main():
    app = InfradrillApp()
    async with app.run_test(size=(80, 24)) as pilot:
        while app.drill is None:
            await pilot.pause(0.05)
        app.open_question("weight-read-intensity")
        while not (isinstance(app.screen, QuestionScreen) and app.screen.query("AnswerField Input")):
            await pilot.pause(0.05)
        await pilot.pause(0.2)
    print(json.dumps({"rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))

asyncio.run(main())
"""


def child(code: str) -> dict:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"benchmark child failed:\n{result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def first_paint() -> tuple[float, float]:
    bare = [child(BARE)["paint"] for _ in range(PAINT_RUNS)]
    app = [child(APP)["paint"] for _ in range(PAINT_RUNS)]
    return statistics.median(bare), statistics.median(app)


def solve_times() -> dict[str, list[float]]:
    from solvers.bank import load_bank
    from solvers.data import load_catalog
    from solvers.engine import VariantCode, make_variant
    from solvers.report import to_text
    from tui.render import regime_panel, step_renderable

    bank, catalog = load_bank(), load_catalog()
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
    from solvers.bank import load_bank
    from solvers.data import load_catalog
    from solvers.engine import VariantCode, make_variant
    from solvers.followup import follow_up

    bank, catalog = load_bank(), load_catalog()
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


def p95(samples: list[float]) -> float:
    return sorted(samples)[max(0, int(round(0.95 * len(samples))) - 1)]


def main() -> int:
    bare, app = first_paint()
    print(f"first paint (median of {PAINT_RUNS}, headless 80x24)")
    print(f"  bare Textual app   {bare * 1000:7.1f} ms")
    print(f"  infradrill         {app * 1000:7.1f} ms   ratio {app / bare:.2f}x  (target <= 1.3x)")
    print(f"\nsolve + render per variant ({SEEDS} seeds each)")
    worst = 0.0
    for qid, samples in solve_times().items():
        worst = max(worst, p95(samples))
        print(f"  {qid:28s} median {statistics.median(samples) * 1000:6.2f} ms   p95 {p95(samples) * 1000:6.2f} ms")
    print(f"  worst p95 {worst * 1000:.2f} ms  (target < 20 ms)")
    print(f"\nfollow-up search per variant ({FOLLOWUP_SEEDS} seeds each; runs in a worker after submit)")
    pushes = followup_times()
    slowest = max(pushes, key=lambda q: p95(pushes[q]))
    medians = [statistics.median(v) for v in pushes.values()]
    print(f"  median over questions {statistics.median(medians) * 1000:6.1f} ms   "
          f"worst p95 {p95(pushes[slowest]) * 1000:6.1f} ms ({slowest})  (target < 400 ms)")
    solve_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    app_rss = child(_LOADED)["rss_kb"] / 1024
    print("\npeak RSS")
    print(f"  app, bank loaded and one variant open  {app_rss:6.1f} MB  (target < 150 MB)")
    print(f"  this process after solving every seed  {solve_rss:6.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
