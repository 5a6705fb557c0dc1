"""A figure in an answer's label or option is a {field} of the parameter the solver reads: the candidate
reads the figure the grader compares against, and the option's identity stays its text as written."""
from __future__ import annotations

import json

import pytest

from solvers.bank import PLACEHOLDER
from solvers.engine import VariantCode, make_variant
from solvers.report import grade_rows, to_dict, to_markdown, to_text
from solvers.units import figures_against, format_number

UPGRADE = "a GPU {upgrade} faster in both HBM bandwidth and tensor peak (same NVLink)"


@pytest.mark.parametrize(("raise_by", "holds"), [(30, False), (22, None), (20, True)])
def test_the_label_reads_the_figure_the_solver_compares_against(variant, raise_by, holds):
    """weight-read-intensity@default: the 30%-faster GPU gains 1.219x (the step model's 2 ms and all-reduces
    do not shrink), short of 30%, past 20%, and within 1% of 22% (too close to call: judged but not listed).
    Moving the fixed parameter moves the label, the listing and the verdict together."""
    solution = variant(f"weight-read-intensity@default+raise_by={raise_by}")
    levers = solution.question.answer("levers")
    label = f"Which of these would raise this decode step's tokens/s by {raise_by}% or more?"
    assert levers.shown_label == label and label in to_markdown(solution)  # asked in a later stage
    assert solution.sheet.results["levers"][UPGRADE] is holds  # the template is the option's identity
    assert levers.text(UPGRADE) == "a GPU 30% faster in both HBM bandwidth and tensor peak (same NVLink)"
    listed = [o for o in to_dict(solution)["answers"] if o["key"] == "levers"][0]
    assert listed["label"] == label and all("{" not in item for item in listed["listed"])


def test_every_rendered_label_and_option_is_filled(bank, catalog):
    """Over the bank, the default and two draws of every question: no field is left unfilled anywhere the
    candidate reads (the prompt with its listings, the labels, the options, the JSON, text and Markdown a
    variant exports, the grade table after a submit)."""
    for question in bank.questions.values():
        for seed in (None, 0, 1):
            solution = make_variant(bank, catalog, VariantCode(question.id, seed))
            texts = [solution.prompt, json.dumps(to_dict(solution), ensure_ascii=False), to_text(solution),
                     to_markdown(solution), *(row[0] for row in grade_rows(solution, solution.grade({})))]
            texts += [spec.text(t) for spec in solution.question.answers for t in spec.texts]
            assert not [t for t in texts if PLACEHOLDER.search(t)], f"{solution.code}"


@pytest.mark.parametrize(("value", "line", "printed"), [
    (1.2450, 1.25, "1.245"),     # a figure just short of its line (weight-read-intensity's upgrade): not "1.25"
    (1.2499, 1.25, "1.2499"),
    (1.2503, 1.25, "1.2503"),
    (1.25, 1.25, "1.25"),        # on the line itself it may read as the line
    (0.0499, 0.05, "0.0499"),
    (1.74, 1.25, "1.74"),        # far from the line: three figures as before
])
def test_a_figure_judged_against_a_line_prints_on_its_own_side(value, line, printed):
    assert format_number(value, figures_against(value, line)) == printed
