"""The interview in stages: a staged file's stages as the engine runs them, an old file's synthesized
pair, the key between stages, the derivation grouped by stage, and the file errors that keep a staged
file runnable."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from solvers.bank import QuestionError, parse_question, questions_dir
from solvers.engine import VariantCode, make_variant
from solvers.interview import asked_keys, key_line, opening, stage_run, steps_by_stage, stored_stages
from tests.old_shape import OLD

STAGED = "kv-bytes-per-token"
SEEDS = range(1, 13)


def _runs(bank, catalog, code: str):
    solution = make_variant(bank, catalog, VariantCode.parse(code))
    return solution, [stage_run(solution, catalog, i) for i in range(len(solution.question.stages))]


def test_an_old_file_runs_as_every_answer_then_the_engines_push(old_bank, catalog):
    question = old_bank.get(OLD)
    assert not question.staged
    assert [s.kind for s in question.stages] == ["opening", "push"]
    assert question.stages[0].ask == tuple(a.key for a in question.answers)
    assert question.stages[1].generated
    solution, (first, push) = _runs(old_bank, catalog, f"{OLD}@7")
    assert first.prompt == solution.prompt
    if push is not None:
        assert push.prefix == "followup." and push.moved
        assert push.solution.code != solution.code


@pytest.mark.parametrize("seed", SEEDS)
def test_a_staged_variant_asks_each_answer_once_before_its_push(bank, catalog, seed):
    question = bank.get(STAGED)
    solution, runs = _runs(bank, catalog, f"{STAGED}@{seed}")
    assert question.staged and [r.kind for r in runs if r][:3] == ["opening", "ask", "ask"]
    before_push = [k for r in runs if r and r.kind != "push" for k in r.ask]
    assert sorted(before_push) == sorted(a.key for a in question.answers)
    for run in runs:
        if run is None:
            continue
        assert "{" not in run.say and run.say.strip()
        assert run.prompt.startswith(run.say)
    push = runs[-1]
    if push is not None:
        assert push.moved and all(push.solution.param(n).raw != solution.param(n).raw for n in push.moved)
        assert asked_keys([push]) == [f"followup.{k}" for k in push.ask]


def test_a_stage_is_graded_on_its_own_keys_whatever_came_before(bank, catalog):
    """A slip in the opening fails the opening only: the next stage is checked against the key."""
    solution, runs = _runs(bank, catalog, f"{STAGED}@3")
    first, second = runs[0], runs[1]
    wrong = {key: "1" for key in first.ask}
    assert not any(g.correct for g in first.grade(wrong))
    right = {key: spec.key_text(solution.expected[key], solution.shown.get(key, ()))
             for key in second.ask for spec in [solution.question.answer(key)]}
    assert all(g.correct for g in second.grade(right))


def test_a_later_say_quotes_an_earlier_key_never_the_candidates_answer(tmp_path, bank, catalog):
    text = (questions_dir() / "F" / f"{STAGED}.yaml").read_text()
    text = text.replace("Your TPOT target is {tpot}.", "With {users} in, your TPOT target is {tpot}.")
    question = parse_question(tmp_path / f"{STAGED}.yaml", text)
    solution = make_variant(bank, catalog, VariantCode.parse(f"{STAGED}@5"))
    run = stage_run(solution.__class__(**{**solution.__dict__, "question": question}), catalog, 2)
    users = solution.question.answer("users").key_text(solution.expected["users"], ())
    assert f"With {users} in, your TPOT" in run.say and users.endswith("requests")


@pytest.mark.parametrize("seed", SEEDS)
def test_the_key_line_says_the_key_and_how_it_came(bank, catalog, seed):
    solution = make_variant(bank, catalog, VariantCode.parse(f"{STAGED}@{seed}"))
    for key in ("kv_per_token", "users"):
        spec = solution.question.answer(key)
        line = key_line(solution, key)
        assert line.startswith(spec.key_text(solution.expected[key], ())) and "=" not in line.split(":")[0]
        assert len(line) > len(spec.key_text(solution.expected[key], ())) + 5, "a why follows the key"
    assert key_line(solution, "regime").startswith(solution.sheet.regime.name)


def test_every_question_groups_its_steps_by_stage(bank, catalog):
    """What the solution screen and the key sheet do with every variant: moe-1t-training-layout's default put a
    Python float where a formula was meant (E over twice the EP group) and its solution screen raised."""
    for qid in sorted(bank.questions):
        solution = make_variant(bank, catalog, VariantCode(qid, None))
        assert sum(map(len, steps_by_stage(solution))) == len(solution.sheet.steps), qid


@pytest.mark.parametrize("qid", [STAGED, OLD, "users-per-gpu"])
def test_every_step_sits_once_under_the_first_stage_that_needs_it(old_bank, catalog, qid):
    solution = make_variant(old_bank, catalog, VariantCode.parse(f"{qid}@11"))
    groups = steps_by_stage(solution)
    flat = [s for group in groups for s in group]
    assert sorted(map(id, flat)) == sorted(map(id, solution.sheet.steps))
    for index, stage in enumerate(solution.question.stages):
        if stage.push:
            assert groups[index] == []
            continue
        for key in stage.ask:
            step = next((s for s in solution.sheet.steps if s.key == key), None)
            if step is not None:
                assert any(step is s for g in groups[:index + 1] for s in g), f"{key} answered before its stage"


def test_the_opening_is_the_variants_prompt(bank, catalog):
    solution = make_variant(bank, catalog, VariantCode.parse(f"{STAGED}@2"))
    assert opening(solution).prompt == solution.prompt


_PUSH_BY = "  - say: a\n    ask: [kv_per_token]\n  - set: {}\n    ask: [regime]\n"  # an opening, then a push
BAD_STAGES = {  # the stages block -> what the error says
    "push first": ("  - push: generated\n    ask: [regime]\n", "first stage opens"),
    "key asked twice": ("  - say: a\n    ask: [kv_per_token]\n  - say: b\n    ask: [kv_per_token]\n", "asked already"),
    "unknown key": ("  - say: a\n    ask: [nope]\n", "name answers of this question"),
    "a key never asked": ("  - say: a\n    ask: [kv_per_token]\n", "asked in no stage"),
    "a key quoted before it is asked": ("  - say: '{users} fit'\n    ask: [users]\n", "names no parameter"),
    "a nudge that is no push": ("  - say: a\n    ask: [kv_per_token]\n    nudge: why\n", "only a push"),
    "a factor of a choice": (_PUSH_BY.format("{tp: '÷2'}"), "only a drawn range"),
    "a factor that moves nothing": (_PUSH_BY.format("{context: '×1'}"), "no factor that moves it"),
    "a factor of zero": (_PUSH_BY.format("{context: '÷0'}"), "no factor that moves it"),
    "set and generated": ("  - say: a\n    ask: [kv_per_token]\n"
                          "  - set: {tp: 8}\n    push: generated\n    ask: [regime]\n", "not both"),
    "reasons on a stage that is no push": ("  - say: a\n    ask: [kv_per_token]\n"
                                           "  - say: b\n    reasons: {tp: 'TP {to}'}\n    ask: [regime]\n",
                                           "only a push has reasons"),
    "a reason without the new value": ("  - say: a\n    ask: [kv_per_token]\n"
                                       "  - push: generated\n    reasons: {tp: more GPUs}\n    ask: [regime]\n",
                                       "with {to} where the new value goes"),
    "a reason for no parameter": ("  - say: a\n    ask: [kv_per_token]\n"
                                  "  - push: generated\n    reasons: {nope: '{to}'}\n    ask: [regime]\n",
                                  "names no parameter of this question"),
    "a reason of either way, not both": ("  - say: a\n    ask: [kv_per_token]\n"
                                         "  - push: generated\n    reasons: {tp: {up: 'TP {to}'}}\n    ask: [regime]\n",
                                         "one reason, or {up: ..., down: ...}"),
    "a way's reason without the new value": ("  - say: a\n    ask: [kv_per_token]\n"
                                             "  - push: generated\n    reasons: {tp: {up: 'TP {to}', down: fewer}}\n"
                                             "    ask: [regime]\n", "stages[1].reasons.tp.down"),
    "figures the opening gives later": ("  - say: a\n    ask: [kv_per_token]\n    gives: [tpot]\n",
                                        "the opening's table shows every figure"),
    "a figure named before its stage gives it": ("  - say: 'within {tpot}'\n    ask: [kv_per_token]\n"
                                                 "  - say: b\n    gives: [tpot]\n    ask: [users]\n",
                                                 "{tpot} is given by a later stage"),
    "a figure given twice": ("  - say: a\n    ask: [kv_per_token]\n  - say: b\n    gives: [tpot]\n    ask: [users]\n"
                             "  - say: c\n    gives: [tpot]\n    ask: [served]\n", "each parameter given by one stage"),
    "a given that is no parameter": ("  - say: a\n    ask: [kv_per_token]\n  - say: b\n    gives: [nope]\n"
                                     "    ask: [users]\n", "a list of this question's parameters"),
    "a reason's unknown field": ("  - say: a\n    ask: [kv_per_token]\n"
                                 "  - push: generated\n    reasons: {tp: '{to} from {before}'}\n    ask: [regime]\n",
                                 "names no parameter, nor {from} or {to}"),
}


@pytest.mark.parametrize("name", sorted(BAD_STAGES))
def test_a_stages_block_the_engine_cannot_run_is_one_error(tmp_path, name):
    block, says = BAD_STAGES[name]
    text = (questions_dir() / "F" / f"{STAGED}.yaml").read_text()
    text = re.sub(r"^stages:\n(?:[ -].*\n)+", "stages:\n" + block, text, flags=re.M)
    with pytest.raises(QuestionError, match=re.escape(says)):
        parse_question(tmp_path / f"{STAGED}.yaml", text)


def test_a_staged_file_keeps_no_prompt_of_its_own(tmp_path):
    text = (questions_dir() / "F" / f"{STAGED}.yaml").read_text().replace("stages:\n", "prompt: hello\nstages:\n", 1)
    with pytest.raises(QuestionError, match="prompt"):
        parse_question(Path(tmp_path / f"{STAGED}.yaml"), text)


def test_progress_keeps_each_stored_key_with_the_stage_that_asked_it(bank, catalog):
    solution, runs = _runs(bank, catalog, f"{STAGED}@4")
    runs = [r for r in runs if r is not None]
    stages = stored_stages(runs)
    assert list(stages) == asked_keys(runs)
    assert stages["kv_per_token"] == (0, "opening") and stages["users"] == (1, "ask")
    if runs[-1].kind == "push":  # a turn of one push a side: the side's own stage index
        assert all(stages["followup." + k] == (runs[-1].index, "push") for k in runs[-1].ask)


def test_the_cards_in_play_include_the_all_reduce_model_a_tp_group_runs(bank, catalog):
    """The independent re-derivation of kv-bytes-per-token found the all-reduce's bandwidth term unstated:
    the model's card was never read by name, so the screen did not list it."""
    grouped = make_variant(bank, catalog, VariantCode.parse(f"{STAGED}@default+tp=8"))
    alone = make_variant(bank, catalog, VariantCode.parse(f"{STAGED}@default+tp=1+model=llama-3-8b"))
    assert "tp-all-reduce" in grouped.cards() and "tp-all-reduce" not in alone.cards()


# The file's own pushes, one a side, swapped for the test's own (from the comment above them to the last ask).
GENERATED = re.search(r"  # One turn, a push for each side.*?when: latency-limited\n.*?"
                      r"ask: \[regime, served, levers\]\n",
                      (questions_dir() / "F" / f"{STAGED}.yaml").read_text(), re.S).group(0)
TWO_SIDED = """  - say: |
      It's a batch job now: {tpot} a token is fine. What caps concurrency?
    when: latency-limited
    set: {tpot: 60}
    nudge: where one step over the whole KV pool takes longer than 60 ms no drawn target frees it
    ask: [regime, served]
    hints: ["A looser target lets each step read more KV."]
  - say: |
      Product wants snappier replies: {tpot} a token. What caps concurrency?
    when: capacity-limited
    set: {tpot: 15}
    ask: [regime, served]
    hints: ["A tighter target caps the batch a step may read."]
"""


def _two_sided(tmp_path):
    text = (questions_dir() / "F" / f"{STAGED}.yaml").read_text()
    text = text.replace(GENERATED, TWO_SIDED)
    return parse_question(tmp_path / f"{STAGED}.yaml", text)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_declared_push_per_side_is_one_turn_asked_of_its_side_only(tmp_path, bank, catalog, seed):
    question = _two_sided(tmp_path)
    assert [s.when for s in question.stages[3:]] == ["latency-limited", "capacity-limited"]
    assert question.push_prefix(3) == question.push_prefix(4) == "followup."
    base = make_variant(bank, catalog, VariantCode.parse(f"{STAGED}@{seed}"))
    solution = base.__class__(**{**base.__dict__, "question": question})
    runs = {i: stage_run(solution, catalog, i) for i in (3, 4)}
    side = base.sheet.regime.name
    for index, run in runs.items():
        assert (run is not None) == (question.stages[index].when == side) or run is None
    ran = [run for run in runs.values() if run is not None]
    assert len(ran) <= 1
    for run in ran:
        assert run.prefix == "followup."
        if run.declared:
            assert run.moved == ("tpot",) and str(run.solution.param("tpot").raw) in ("60", "15")
            assert run.say.startswith(("It's a batch job now", "Product wants snappier"))
            assert run.hints == question.stages[run.index].hints
        else:  # the declared move is refused or does not cross here: the engine's push stands in, in its own words,
            # and without the hints written for the move it did not make
            assert not run.say.startswith(("It's a batch job", "Product wants"))
            assert run.hints == ()


HALVED = """  - say: |
      Halve the context: {context}. How many requests fit now?
    set: {context: "÷2"}
    nudge: a shorter context frees KV a request holds, which need not change what binds
    ask: [regime, served]
"""


def test_a_push_by_a_factor_moves_each_variants_own_value_and_a_nudge_says_where_it_crosses(tmp_path, bank,
                                                                                           catalog):
    text = (questions_dir() / "F" / f"{STAGED}.yaml").read_text().replace(GENERATED, HALVED)
    question = parse_question(tmp_path / f"{STAGED}.yaml", text)
    notes = set()
    for seed in (*range(1, 13), 34, 36):  # 34 and 36 cross on the halved context (in the step model's draws)
        base = make_variant(bank, catalog, VariantCode.parse(f"{STAGED}@{seed}"))
        run = stage_run(base.__class__(**{**base.__dict__, "question": question}), catalog, 3)
        assert run is not None
        if not run.declared:  # the halved context refused here: the engine's push stands in, and no nudge is said
            assert run.nudge_note == ""
            continue
        context = base.param("context").raw
        assert run.solution.param("context").raw == question.parameter("context").rounded(context / 2)
        crossed = run.regime != base.regime_name
        assert run.nudge_note.startswith("A nudge that crosses on this variant" if crossed else
                                         "A nudge, not a crossing")
        assert not crossed or f"({base.regime_name} → {run.regime})" in run.nudge_note
        notes.add(crossed)
    assert notes == {True, False}  # both kinds of line over these seeds


def test_a_when_names_a_regime_on_a_push_once_a_turn(tmp_path):
    text = (questions_dir() / "F" / f"{STAGED}.yaml").read_text()
    push = GENERATED
    asks = "    ask: [batch_tpot, served, regime, levers]\n"
    cases = ((text.replace(push, TWO_SIDED.replace("capacity-limited", "latency-limited")), "two pushes of one turn"),
             (text.replace(push, TWO_SIDED.replace("when: capacity-limited", "when: roomy")), "names a choice"),
             (text.replace(asks, asks + "    when: capacity-limited\n"), "names a choice"))  # a stage that is no push
    for wrong, says in cases:
        with pytest.raises(QuestionError, match=says):
            parse_question(tmp_path / f"{STAGED}.yaml", wrong)


def test_a_decided_choice_shows_the_solvers_line_of_why_beside_its_key(bank, catalog):
    """A choice the solver decides with s.choose(key, choice, why) is corrected as an interviewer would,
    not as a bare word; without a why it stays the bare key."""
    from solvers.derivation import Sheet

    sheet = Sheet()
    sheet.choose("prefill_regime", "compute-bound", "2 × 70B FLOPs a token over 8K tokens outruns the reads")
    assert sheet.results["prefill_regime"] == "compute-bound"
    assert sheet.choice_whys == {"prefill_regime": "2 × 70B FLOPs a token over 8K tokens outruns the reads"}
    solution = next(make_variant(bank, catalog, VariantCode.parse(f"{qid}@3")) for qid in bank.questions
                    if any(a.key == "prefill_regime" for a in bank.get(qid).answers))
    whys = solution.sheet.choice_whys
    own = whys.pop("prefill_regime", None)
    try:
        bare = key_line(solution, "prefill_regime")
        assert bare == solution.expected["prefill_regime"]
        whys["prefill_regime"] = "because"
        assert key_line(solution, "prefill_regime") == f"{bare}: because"
    finally:  # the variant may be shared by a cache: its own why goes back
        whys.pop("prefill_regime")
        if own is not None:
            whys["prefill_regime"] = own


def test_validate_counts_a_turn_of_pushes_per_side_as_one_push_over_every_draw(tmp_path, bank, catalog):
    """Each side's push runs only on its side's draws: together they must cross in 90% of all draws; one
    side alone leaves the other side's draws without a push, which counts against it."""
    from solvers.stagebar import draw_problems

    def draws(question):
        return [make_variant(bank, catalog, VariantCode.parse(f"{STAGED}@{seed}")) for seed in SEEDS]

    both = _two_sided(tmp_path)
    assert both.turn_of(4) == both.turn_of(3) == 3
    swap = [d.__class__(**{**d.__dict__, "question": both}) for d in draws(both)]
    assert not [p for p in draw_problems(both, swap, catalog) if "regime boundary" in p]
    text = (questions_dir() / "F" / f"{STAGED}.yaml").read_text()
    latency_side = "  - say: |\n" + TWO_SIDED.split("  - say: |\n")[1]
    one_side = text.replace(GENERATED, latency_side)
    alone = parse_question(tmp_path / f"{STAGED}.yaml", one_side)
    sides = {d.sheet.regime.name for d in swap}
    assert sides == {"latency-limited", "capacity-limited"}, "both sides drawn, or the test shows nothing"
    swap = [d.__class__(**{**d.__dict__, "question": alone}) for d in swap]
    assert [p for p in draw_problems(alone, swap, catalog) if "stages[3]: the push crosses" in p]


def test_a_saved_attempt_scores_a_turn_of_pushes_per_side_once(tmp_path):
    from solvers.transcript import by_stage

    question = _two_sided(tmp_path)
    verdicts = {"kv_per_token": True, "kv_per_request": False, "users": True, "tpot_fit": True,
                "followup.regime": True, "followup.served": False}
    assert by_stage(question, verdicts) == [(1, 2), (2, 2), (1, 2)]


def test_a_step_timed_by_the_step_model_lists_the_roofline_rule_in_play(bank, catalog):
    """The long-reply-batching re-derivation could not tell whether a step adds its reads and its math or
    takes the longer: the step model never named the card whose rule it is."""
    solution = make_variant(bank, catalog, VariantCode.parse("long-reply-batching@6404"))
    assert "roofline-time" in solution.cards()


def test_the_cards_in_play_are_the_same_for_the_first_variant_a_process_solves():
    """A card a model module reads at import (a step constant) was listed for whichever variant first
    imported it: model-runner-v2@8101 showed the step-overhead card its solver replaces."""
    import ast
    import subprocess
    import sys

    code = ("from solvers.bank import load_bank; from solvers.data import load_catalog; "
            "from solvers.engine import VariantCode, make_variant; b, c = load_bank(), load_catalog(); "
            "print([make_variant(b, c, VariantCode.parse('model-runner-v2@8101')).cards() for _ in range(2)])")
    first, again = ast.literal_eval(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                       check=True).stdout)
    assert first == again and "step-overhead" not in first


@pytest.mark.parametrize("code", ["pause-storm-origin@1", "loss-plateau-triage@1"])
def test_what_a_push_moved_names_a_redrawn_table_without_printing_it(bank, catalog, code):
    """A push that moves a figure a generated table depends on redraws the table: the notes say so in a
    line, where they printed both tables (the 'Moved:' line ran to thirty lines)."""
    from solvers.params.generated import Generated
    from solvers.report import moved

    solution = make_variant(bank, catalog, VariantCode.parse(code))
    push = next(i for i, stage in enumerate(solution.question.stages) if stage.push)
    run = stage_run(solution, catalog, push)
    assert run is not None
    drawn = [name for name in run.moved if isinstance(solution.question.parameter(name), Generated)]
    tables = [name for name in drawn if "\n" in solution.param(name).shown]
    said = moved(run, solution)
    assert tables and "\n" not in said and all(f"{solution.param(t).label} redrawn" in said for t in tables)
    assert said.count("redrawn") == len(tables) and said.count("→") == len(run.moved) - len(drawn)
    assert all(f"{solution.param(n).shown} → {run.solution.param(n).shown}" in said
               for n in run.moved if n not in drawn)


def test_a_push_names_the_conventions_its_variant_brings_that_the_opening_did_not_use(bank, catalog):
    """model-runner-v2@1's push moves to a TP group whose all-reduces pay NVLink's per-call latency, a card
    the opening's single GPU never read: the candidate is told it is now in play, in the script and the JSON."""
    from solvers.conventions import conventions
    from solvers.export import candidate_sheet
    from solvers.report import script_markdown, stage_dict
    from solvers.script import script

    solution, runs = _runs(bank, catalog, "model-runner-v2@1")
    push = runs[-1]
    assert push is not None and push.stage.push
    opening_cards = solution.cards()
    assert push.cards_added == tuple(c for c in push.solution.cards() if c not in opening_cards)
    assert "all-reduce-latency-nvlink" in push.cards_added and "all-reduce-latency-nvlink" not in opening_cards
    assert all(run.cards_added == () for run in runs[:-1] if run is not None)  # only a push moves the variant
    read = script(solution, catalog)
    assert "Conventions now also in play: all-reduce-latency-nvlink." in script_markdown(read, 3)
    assert stage_dict(read.stages[-1])["cards_added"] == list(push.cards_added)
    assert stage_dict(read.stages[0])["cards_added"] == []
    sheet = candidate_sheet().entry(1, read)  # the sheet names cards by the titles its Conventions section uses
    titles = {card.id: card.title for card in conventions()}
    assert sheet.count(f"Conventions now also in play: {titles['all-reduce-latency-nvlink']}.") == 1
    opening = sheet.split("### Stage 2")[0]
    assert f"Conventions in play: {'; '.join(titles[c] for c in opening_cards)}." in opening


def test_a_generated_push_gives_its_reason_for_the_figure_it_moved_then_its_ask(bank, catalog):
    """Readers heard the engine's "Let's change one thing ... What changes, and what matters now?" as a worksheet:
    a push stage's `reasons:` give an interviewer's reason for each figure the search may move, said before the
    stage's own ask. A figure without a reason keeps the stage's words alone, or the engine's."""
    from dataclasses import replace

    solution = make_variant(bank, catalog, VariantCode.parse("decode-loop-overlap@0"))
    index = next(i for i, stage in enumerate(solution.question.stages) if stage.generated)
    push = stage_run(solution, catalog, index)
    assert push.moved == ("cpu_step",)
    before, after = solution.param("cpu_step").shown, push.solution.param("cpu_step").shown
    assert push.say.startswith(f"A profiler shows the scheduler's fixed cost a step at {after}, not {before}. ")
    stage = solution.question.stages[index]
    ask = " ".join(stage.say.split("{")[0].split())  # the stage's own words (to its first field), after the reason
    said = " ".join(push.say.split())
    assert ask in said and said.index(ask) > said.index(before)
    for changed, says in ((replace(stage, reasons=()), ask[:40]), (replace(stage, reasons=(), say=""),
                                                                    "Let's change one thing: ")):
        stages = tuple(changed if i == index else s for i, s in enumerate(solution.question.stages))
        bare = replace(solution, question=replace(solution.question, stages=stages))
        assert " ".join(stage_run(bare, catalog, index).say.split()).startswith(says)


def test_a_push_reason_may_say_each_way_the_figure_moves(bank, catalog):
    """One reason for both ways read "a terse-answer mode ships" over a push that lengthened the replies
    (serving-cost-ledger@61027): `{up: ..., down: ...}` words each way, said for the way the search moved."""
    from dataclasses import replace

    solution = make_variant(bank, catalog, VariantCode.parse("decode-loop-overlap@0"))
    index = next(i for i, stage in enumerate(solution.question.stages) if stage.generated)
    stage = solution.question.stages[index]
    ways = replace(stage, reasons=(("cpu_step", "It grew to {to}.", "It shrank to {to}."),))
    stages = tuple(ways if i == index else s for i, s in enumerate(solution.question.stages))
    push = stage_run(replace(solution, question=replace(solution.question, stages=stages)), catalog, index)
    rose = push.solution.param("cpu_step").raw > solution.param("cpu_step").raw
    assert push.say.startswith(("It grew to " if rose else "It shrank to ") + push.solution.param("cpu_step").shown)
    assert (ways.reason("cpu_step", True), ways.reason("cpu_step", False)) == ("It grew to {to}.", "It shrank to {to}.")
    assert ways.reason("tp", True) == ""


def test_a_select_key_names_each_option_that_holds_once_with_its_reason(bank, catalog):
    """Read11: every select key printed the options' letters and labels, then each label again before its reason."""
    solution = make_variant(bank, catalog, VariantCode.parse("serving-cost-ledger@61027"))
    spec, held = solution.question.answer("levers"), solution.expected["levers"]
    reasons = solution.sheet.reasons["levers"]
    line = key_line(solution, "levers")
    shown = solution.shown["levers"]
    assert held and all(line.count(spec.text(o)) == 1 for o in held)
    assert line.startswith(spec.key_text(held, shown))
    assert all(f"{'ABCDEFGH'[list(shown).index(o)]}: {reasons[o]}" in line for o in held if reasons.get(o))


def _held_back(tmp_path, text: str, gives: str, said: str = ""):
    """kv-bytes-per-token with `gives` on its second stage (`said`, a sentence of the opening's, taken out)."""
    second = "  - say: |\n      Each {gpu}"
    text = text.replace(said, "").replace(second, f"  - gives: [{gives}]\n" + second.replace("  - ", "    ", 1))
    return parse_question(tmp_path / f"{STAGED}.yaml", text)


def test_validate_finds_a_held_back_figure_an_earlier_answer_needs(tmp_path, catalog):
    """A figure a later stage gives cannot feed an answer asked before it: the request's context is held back to
    stage 2 while the opening asks the KV of one full request. The TPOT target held back is fine: only stage 3
    asks what it feeds."""
    from solvers.engine import question_variant
    from solvers.stagebar import withheld_problems

    text = (questions_dir() / "F" / f"{STAGED}.yaml").read_text()
    for gives, said, found in (("context", " Every request holds {context}.", "context feeds kv_per_request"),
                               ("tpot", "", "")):
        question = _held_back(tmp_path, text, gives, said)
        draws = [question_variant(question, catalog, VariantCode(STAGED, seed)) for seed in range(4)]
        problems = withheld_problems(question, draws, catalog)
        assert [p for p in problems if found in p] if found else not problems, problems


def test_a_figure_a_later_stage_gives_is_left_out_of_the_tables_before_it(bank, catalog):
    """hidden-memory-budget holds its memory consumers back to stage 3 (its recall stage asks for them): the
    opening's table and the candidate's sheet leave them out, stage 3 shows them, and the script marks them."""
    from solvers.export import candidate_sheet
    from solvers.report import to_markdown
    from solvers.script import script as interview_script

    solution = make_variant(bank, catalog, VariantCode.parse("hidden-memory-budget@3"))
    held = set(solution.question.stages[2].gives)
    assert held and not held & {p.name for p in solution.problem_data(0)}
    assert {p.name for p in solution.newly_given(2)} == held == {p.name for p in solution.problem_data(2)} - {
        p.name for p in solution.problem_data(0)}
    assert {p.name for p in solution.problem_data()} >= held
    script = interview_script(solution, catalog)
    markdown = to_markdown(solution, script)
    label = solution.param("cuda_graphs").label
    assert f"| {label} (given at stage 3) |" in markdown and "Give now: " in markdown
    sheet = candidate_sheet().entry(1, script)
    given, stage3 = sheet.split("### Stage 1")[0], sheet.split("### Stage 3")[1].split("### Stage 4")[0]
    assert f"- {label}:" not in given and f"- {label}:" in stage3


@pytest.mark.parametrize("seed", [0, 1, 5, 10])  # 5 and 10: users-per-gpu's push moved the model, the GPU
def test_a_generated_push_with_reasons_moves_only_what_it_has_a_reason_for(bank, catalog, seed):
    """An interviewer moves a figure they have a story for: where a push gives reasons, its search moves no
    other figure (users-per-gpu's push moved the GPU, which it had no words for, and was said in the engine's)."""
    for question in bank.questions.values():
        for index, stage in enumerate(question.stages):
            if not (stage.generated and stage.reasons):
                continue
            solution = make_variant(bank, catalog, VariantCode(question.id, seed))
            run = stage_run(solution, catalog, index) if question.asks_on(index, solution.regime_name) else None
            if run is None:
                continue
            assert set(run.moved) <= {name for name, _, _ in stage.reasons}, (question.id, seed, run.moved)


def test_where_the_engines_push_stands_in_for_a_declared_one_it_says_the_stages_reason(bank, catalog):
    """kv-bytes-per-token@4 is latency-limited, and its declared push (a 60 ms target) cannot move it: the engine's
    push tightens the target instead, said in the stage's reason for that way, not 'Let's change one thing'."""
    solution = make_variant(bank, catalog, VariantCode.parse(f"{STAGED}@4"))
    run = stage_run(solution, catalog, 4)
    assert run is not None and not run.declared and run.moved == ("tpot",)
    assert run.say.startswith("Product wants this endpoint to feel snappy: the TPOT target is now 15 ms.")
    assert "Let's change" not in run.say and run.say.endswith("What changes, and what matters now?")


def test_a_generated_push_declared_a_nudge_says_so_in_the_script(bank, catalog):
    """training-compute-budget's pushes are the engine's search, each declared a nudge: the script said nothing of
    why they need not cross (the note was printed for declared moves only)."""
    solution = make_variant(bank, catalog, VariantCode.parse("training-compute-budget@3"))
    index = next(i for i, stage in enumerate(solution.question.stages)
                 if stage.generated and stage.nudge and solution.question.asks_on(i, solution.regime_name))
    run = stage_run(solution, catalog, index)
    assert run is not None and run.nudge_note.startswith(("A nudge that crosses on this variant", "A nudge, not"))
    assert solution.question.stages[index].nudge in run.nudge_note


# Seeds where a declared push cannot be made and the engine's push stands in, with the stage's reason for the
# figure that stand-in moves (and the way it moves it): fp8-kv-cache's context, kv-quant-keys-vs-values's query
# RMS, key bits and value bits, paged-block-size's block size each way and its mean length.
STAND_INS = [
    ("fp8-kv-cache", 4, 9, "context", "A customer starts sending whole books: a request now holds"),
    ("fp8-kv-cache", 4, 31, "context", "A customer starts sending whole books: a request now holds"),
    ("kv-quant-keys-vs-values", 4, 2, "q_scale",
     "A long-context fine-tune sharpens the attention: the query RMS is now"),
    ("kv-quant-keys-vs-values", 4, 50, "bits", "Memory runs short: keys drop to 2 bits an element."),
    ("kv-quant-keys-vs-values", 4, 54, "value_bits", "Values now get 4 bits an element, keys as they were."),
    ("paged-block-size", 3, 9, "block_size", "Your kernel team wants blocks of"),
    ("paged-block-size", 3, 60, "block_size", "Blocks of 8 tokens would win the memory back"),
    ("paged-block-size", 3, 104, "mean_length", "Agents arrive with longer conversations: sequences now average"),
]


@pytest.mark.parametrize("question_id, index, seed, moved, words", STAND_INS)
def test_a_declared_pushs_stand_in_says_the_files_reason_not_the_engines_words(bank, catalog, question_id, index,
                                                                               seed, moved, words):
    """Where a declared push cannot be made on a draw, the engine's push stands in, moving only figures the stage
    has a reason for, and says that reason (its way, up or down) before the engine's ask: no 'Let's change one
    thing: block size from 64 tokens to 128 tokens'."""
    solution = make_variant(bank, catalog, VariantCode(question_id, seed))
    run = stage_run(solution, catalog, index)
    assert run is not None and not run.declared and run.moved == (moved,), (question_id, seed, run and run.moved)
    assert run.say.startswith(words), run.say
    assert "Let's change" not in run.say and run.say.endswith("What changes, and what matters now?")



@pytest.mark.parametrize("qid", ["spec-decode-step-accounting", "spec-decode-tail"])
def test_a_push_the_engine_searches_says_what_moved_and_why(bank, catalog, qid):
    """read12: both pushes opened on "The traffic shifts (what moved is marked)", an interviewer who never says
    what moved. Each figure the search moves has the interviewer's reason, which names its new value."""
    for seed in range(12):
        solution = make_variant(bank, catalog, VariantCode(qid, seed))
        pushed = stage_run(solution, catalog, 3)
        if pushed is None:
            continue
        assert "what moved is marked" not in pushed.say and len(pushed.moved) == 1, seed
        assert pushed.solution.param(pushed.moved[0]).shown in pushed.say, (seed, pushed.say)
