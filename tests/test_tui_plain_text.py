"""Text the app echoes (typed answers, problems in user files, data labels) is shown as text:
Rich markup in it is neither applied nor able to take the app down."""
from __future__ import annotations

import asyncio
from dataclasses import replace

from textual.widgets import Input

from solvers.answers import UNPARSED, Grade
from tests.pilot_helpers import notice_posted, open_default, running_app, text_of, wait_for
from tui.render import givens_table, grade_table

MARKUP = "[/x] [b]bold?[/b] [/"


def rendered(renderable) -> str:
    return text_of(renderable, width=200)


def test_markup_in_a_user_file_and_in_typed_answers_is_shown_as_typed(config_dir):
    (config_dir / "hardware.yaml").write_text(
        'gpus:\n  odd-gpu:\n    name: "[/x] GPU"\n    "[/y]": 1\n    vendor: x\n    bf16_dense_tflops: 1\n'
        "    hbm_gb: 1\n    hbm_tb_s: 1\n    source: a test\n", encoding="utf-8")

    async def scenario():
        async with running_app() as (app, pilot):
            # The problem, named as written (notices arrive as messages: wait for it).
            await wait_for(pilot, notice_posted(app, "[/y]"))
            await open_default(app, pilot, "weight-read-intensity")
            box = app.screen.query("AnswerField Input").results(Input).__next__()
            box.value = MARKUP
            await wait_for(pilot, lambda: MARKUP in str(app.screen.query_one("AnswerField .note").render()))
            await pilot.press("ctrl+s")  # refused with a notice that quotes the answer's number, not a crash
            await wait_for(pilot, notice_posted(app, "cannot be read"))
            app.notify(f"a notice quoting {MARKUP}")
            await wait_for(pilot, notice_posted(app, f"a notice quoting {MARKUP}"))
            assert app.is_running and app.screen.query("AnswerField")

    asyncio.run(scenario())


def test_tables_of_a_solution_print_typed_text_and_data_labels_literally(variant):
    solution = variant("weight-read-intensity@default")
    key = solution.question.answers[0].key
    grade = Grade(key, UNPARSED, MARKUP, "1 GB", message=f"'{MARKUP}' is not a number")
    assert MARKUP in rendered(grade_table(solution, [grade]))
    solution.sheet.givens[0] = replace(solution.sheet.givens[0], label=MARKUP)
    assert MARKUP in rendered(givens_table(solution))
