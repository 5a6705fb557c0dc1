"""`validate`: the bank is clean; each kind of broken question file is reported."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from solvers.validate import validate
from tests.old_shape import old_source

# weight-read-intensity in the old shape (its stages as one prompt, every answer at once): the file these
# checks were written on, and the shape a user's pack may still have.
SOURCE = old_source()


def old_shape():
    """SOURCE as a question: the bar over its own seeds, without the staged bar's 200 draws."""
    from solvers.bank import parse_question

    return parse_question(Path("questions/F/weight-read-intensity.yaml"), SOURCE)


def write(root: Path, name: str, text: str, solver: str = "roofline.weight_read_intensity") -> None:
    """A copy of weight-read-intensity under another id, reusing its solver (as a user's pack may)."""
    copy = text.replace("id: weight-read-intensity", f"id: {name}" + (f"\nsolver: {solver}" if solver else ""))
    (root / f"{name}.yaml").write_text(copy)


def test_each_problem_is_reported(tmp_path, catalog):
    write(tmp_path, "fine", SOURCE)
    write(tmp_path, "bad-unit", SOURCE.replace("unit: GB, rel", "unit: furlongs, rel"))
    write(tmp_path, "no-solver", SOURCE, solver="roofline.nothing_here")
    write(tmp_path, "unbound", SOURCE.replace("a prompt of {prompt}", "a prompt of {tokens}"))
    extra_key = "  - {key: bogus, label: B, rel: 0.1}\n  - {key: crossover,"
    write(tmp_path, "no-key", SOURCE.replace("  - {key: crossover,", extra_key))
    narrow = SOURCE.replace("loguniform: [16, 2048]", "loguniform: [16, 17]").replace("default: 32", "default: 16")
    write(tmp_path, "one-sided", narrow)
    (tmp_path / "zz-copy").mkdir()  # sorts after fine.yaml: this one is the duplicate
    write(tmp_path / "zz-copy", "fine", SOURCE)
    problems = validate([tmp_path], catalog, seeds=10)
    joined = "\n".join(problems)
    expected = [("bad-unit", "unit"), ("no-solver", "solver"), ("unbound", "prompt"), ("no-key", "solver failed"),
                ("one-sided", "regime_sides"), ("zz-copy/fine", "already used")]
    for name, field in expected:
        assert any(f"{name}.yaml" in p and field in p for p in problems), (name, joined)
    assert not any(p.startswith(str(tmp_path / "fine.yaml")) for p in problems), joined


def test_validate_command_exit_codes(tmp_path, capsys):
    from tui.cli import main

    write(tmp_path, "fine", SOURCE)
    assert main(["validate", str(tmp_path), "--seeds", "5"]) == 0
    write(tmp_path, "bad-unit", SOURCE.replace("unit: GB, rel", "unit: furlongs, rel"))
    assert main(["validate", str(tmp_path), "--seeds", "5"]) == 1
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "bad-unit.yaml" in out and "furlongs" in out


def test_prompt_length_is_reported_and_enforced_under_strict(tmp_path, catalog, capsys):
    from solvers.validate import prompt_report, read_questions
    from tests.test_cli import run_cli

    method = "  One more line of method that the hints should carry.\n" * 16  # past 8 lines once reflowed
    long_prompt = SOURCE.replace("prompt: |\n", "prompt: |\n" + method)
    write(tmp_path, "wordy", long_prompt)
    short = SOURCE.split("prompt: |\n")[0] + "prompt: |\n  {model} on a {gpu}, {batch} per step.\n" + \
        "parameters:" + SOURCE.split("\nparameters:", 1)[1]
    write(tmp_path, "short", short)
    report = dict(prompt_report(read_questions([tmp_path])[0], catalog))
    assert list(report) == [str(tmp_path / "wordy.yaml")] and report[str(tmp_path / "wordy.yaml")] > 8
    code, out, err = run_cli(capsys, "validate", "--seeds", "0", str(tmp_path))
    assert code == 0 and "wordy.yaml: prompt:" in err and "(problems under --strict" in err
    code, out, _ = run_cli(capsys, "validate", "--seeds", "0", "--strict", str(tmp_path))
    assert code == 1 and "wordy.yaml: prompt:" in out and "short.yaml" not in out



def test_strict_measures_the_prompt_of_every_drawn_variant(tmp_path, catalog):
    """A prompt of exactly 8 lines with the default H100 SXM takes 9 where the draw names a GPU
    with a longer name (A100 SXM 80GB): the default's notice misses it, the strict self-test does not."""
    from solvers.engine import VariantCode, make_variant
    from solvers.validate import check_question, prompt_lines, prompt_report, read_questions

    edge = "{gpu} " + "x" * (78 - len("H100 SXM ")) + "\n"  # 78 columns exactly with the default GPU
    lines = "".join(f"  - point {n} of {{model}} on {{gpu}}, {{batch}} per step.\n" for n in range(7))
    write(tmp_path, "edge", SOURCE.split("prompt: |\n")[0] + "prompt: |\n  " + edge + lines + "parameters:"
          + SOURCE.split("\nparameters:", 1)[1])
    bank = read_questions([tmp_path])[0]
    question = bank.get("edge")
    assert prompt_lines(make_variant(bank, catalog, VariantCode("edge", None))) == 8
    assert prompt_report(bank, catalog) == []
    assert not any("prompt:" in p for p in check_question(question, bank, catalog, seeds=15))
    strict = [p for p in check_question(question, bank, catalog, seeds=15, strict=True) if "prompt:" in p]
    assert len(strict) == 1 and "9 lines at 78 columns (seed " in strict[0], strict
    seed = int(strict[0].split("(seed ")[1].split(")")[0])
    drawn = make_variant(bank, catalog, VariantCode("edge", seed))
    assert prompt_lines(drawn) == 9 and "A100 SXM 80GB" in drawn.prompt
    longer = sum(prompt_lines(make_variant(bank, catalog, VariantCode("edge", s))) > 8 for s in range(15))
    assert strict[0].endswith(f"over 8 in {longer} of 16 variants")

def test_strict_flags_keys_that_never_move_and_a_missing_follow_up(bank, catalog, monkeypatch):
    """A question every draw of which is its default variant has every key constant; one whose
    follow-up search finds nothing has no second round. Only --strict counts either."""
    import solvers.validate as validate_module
    from solvers.engine import VariantCode

    question = old_shape()
    assert not validate_module.check_question(question, bank, catalog, seeds=10, strict=True)
    real = validate_module.make_variant
    monkeypatch.setattr(validate_module, "make_variant",
                        lambda b, c, code: real(b, c, VariantCode(code.question_id, None)))
    monkeypatch.setattr(validate_module, "follow_up", lambda solution, catalog: None)
    lenient = validate_module.check_question(question, bank, catalog, seeds=10)
    strict = validate_module.check_question(question, bank, catalog, seeds=10, strict=True)
    constant = {p.split("answers.")[1].split(":")[0] for p in set(strict) - set(lenient) if "one key in 11 of 11" in p}
    assert constant == {a.key for a in question.answers}
    assert any("followups: the default variant has no follow-up round" in p for p in strict)
    assert not any("one key in" in p or "followups" in p for p in lenient)
    assert any("answers.levers" in p and "the same options hold in every variant" in p for p in lenient)


def test_constant_select_options_are_reported_and_varying_ones_are_not(bank, catalog):
    """This report lists single options whose truth never moves, declared facts marked."""
    from solvers.engine import VariantCode, make_variant
    from solvers.validate import constant_options

    question = bank.get("spec-decode-tail")
    reported = constant_options(question, bank, catalog, seeds=20)
    assert any("answers.owners: 'any request off-peak' fails in all" in line
               and line.endswith("(a declared fact)") for line in reported)
    truths: dict[tuple[str, str], set[bool]] = {}
    for seed in [None, *range(20)]:
        solution = make_variant(bank, catalog, VariantCode(question.id, seed))
        for key in ("owners", "policy"):
            for option in solution.shown.get(key, ()):
                truths.setdefault((key, option), set()).add(bool(solution.sheet.results[key][option]))
    for (key, option), seen in truths.items():
        listed = any(f"answers.{key}: '{option}'" in line for line in reported)
        assert not (listed and len(seen) == 2), option  # an option seen both ways is never reported


def _options_bar(bank, catalog, monkeypatch, rejudge) -> list[str]:
    """The strict bar's lines about single options of weight-read-intensity's levers (old shape), its solver
    followed by `rejudge(p, sheet)`, which judges some options again."""
    import solvers.topics.roofline.weight_read_intensity as roofline
    import solvers.validate as validate_module

    monkeypatch.undo()  # a second call in one test wraps the real solver, not the first wrapper
    real = roofline.solve

    def solver(p, s):
        real(p, s)
        rejudge(p, s)

    monkeypatch.setattr(roofline, "solve", solver)
    problems = validate_module.check_question(old_shape(), bank, catalog, seeds=20, strict=True)
    return [line for line in problems if "answers.levers:" in line
            and ("fact" in line or "draws that show" in line or "cannot be decided" in line)]


BATCH, SPEED = "twice the batch (its doubled KV cache must fit in usable HBM)", "a GPU with twice the HBM bandwidth"


def test_strict_fails_a_constant_option_unless_declared_a_fact(bank, catalog, monkeypatch):
    """An option that holds in every draw is judgement the candidate can memorise: strict fails
    it, unless the solver declares it a fact (with its reason as the why)."""
    undeclared = _options_bar(bank, catalog, monkeypatch, lambda p, s: s.judge("levers", BATCH, True, "toy"))
    assert len(undeclared) == 1
    assert f"'{BATCH}' holds in all 21 draws" in undeclared[0] and "declare it a fact" in undeclared[0]
    declared = _options_bar(bank, catalog, monkeypatch,
                            lambda p, s: s.judge("levers", BATCH, True, "a fact here", fact=True))
    assert declared == []


def test_strict_fails_a_declared_fact_that_varies_or_is_declared_in_some_draws(bank, catalog, monkeypatch):
    varying = _options_bar(bank, catalog, monkeypatch,
                           lambda p, s: s.judge("levers", BATCH, p.batch > 200, "toy", fact=True))
    assert len(varying) == 1 and f"'{BATCH}' is declared a fact but holds in" in varying[0]
    sometimes = _options_bar(bank, catalog, monkeypatch,
                             lambda p, s: s.judge("levers", BATCH, True, "toy", fact=p.batch > 200))
    assert len(sometimes) == 1 and f"'{BATCH}' is declared a fact in" in sometimes[0]


def test_declared_facts_are_at_most_half_of_what_a_draw_shows(bank, catalog, monkeypatch):
    """show: 4, so two facts (the question's own and one more) leave every draw two options that follow
    the numbers; three do not."""
    def facts(*options):
        return lambda p, s: [s.judge("levers", o, o == BATCH, "a fact here", fact=True) for o in options]

    assert _options_bar(bank, catalog, monkeypatch, facts(BATCH)) == []
    three = _options_bar(bank, catalog, monkeypatch, facts(BATCH, SPEED))
    assert any("answers.levers: 3 declared facts, more than half of the 4 options a draw shows" in line
               for line in three)


def test_strict_fails_an_option_the_variants_cannot_decide_in_most_draws(bank, catalog, monkeypatch):
    """An option judged None (not decidable in that variant) is never listed there; one undecided in more than
    half of the draws is an option the pool rarely asks, and strict says so. One undecided in a few passes."""
    def undecided(share):
        return lambda p, s: s.judge("levers", SPEED, None if p.batch > share else p.batch > 64, "toy")

    assert _options_bar(bank, catalog, monkeypatch, undecided(1e9)) == []
    rarely = _options_bar(bank, catalog, monkeypatch, undecided(0))
    assert len(rarely) == 1 and f"'{SPEED}' cannot be decided in 21 of 21 draws (at most 50%)" in rarely[0]


UNPINNED = SOURCE.split("\ngolden:\n")[0].rstrip("\n") + "\n"
GOLDEN = """\
golden:
  - variant: default
    expect: {crossover: 221.5, step_time: 17.54, regime: memory-bound}
    why: 2 B × 0.6 × 989.4 / (2 × 0.8 × 3.35) = 221.5 tokens; (141.1 + 5.369 GB) / 10.72 TB/s + 1.88 ms + 2 ms.
  - variant: default+batch=64
    expect:
      regime: compute-bound
      throughput: 4000
    why: Wrong on purpose (151.8 GB / 10.72 TB/s + 2.16 ms of all-reduce + 2 ms = 18.32 ms, 3,493 tokens/s).
  - variant: default+tp=1
    expect: {regime: memory-bound}
    why: 141.1 GB of weights do not fit one H100.
  - variant: "99999999999"
    expect: {regime: memory-bound}
    why: No such seed.
"""


def test_golden_answers_are_checked_and_a_wrong_one_names_its_line_key_and_both_values(tmp_path, catalog):
    write(tmp_path, "pinned", UNPINNED + GOLDEN)
    path = tmp_path / "pinned.yaml"
    golden = path.read_text().splitlines().index("golden:") + 1  # its line
    problems = [p for p in validate([tmp_path], catalog, seeds=0) if "golden" in p]
    assert problems == [
        f"{path}:{golden + 4}: golden[1].regime: pinned@default+batch=64: the solver gives memory-bound, "
        "the file pins compute-bound",
        f"{path}:{golden + 4}: golden[1].throughput: pinned@default+batch=64: the solver gives 3,492.844 tokens/s, "
        "the file pins 4,000 tokens/s",
        f"{path}:{golden + 9}: golden[2]: pinned@default+tp=1: no variant (pinned@default+tp=1: no valid variant "
        "with tp=1 (weights-fit: Llama-3.1-70B in bf16 over 1 GPU(s) needs 141 GB of weights per H100 SXM, past "
        "the 68 GB that leaves room for a KV pool))",
        f"{path}:{golden + 12}: golden[3]: pinned@99999999999: no variant (seed must be between 0 and 2147483647)",
    ], problems


def test_a_seeds_draws_are_pinned_in_the_file_and_a_changed_draw_names_both(tmp_path, catalog):
    """A golden entry's draws: pin what a seed draws (the pinned-seed tests, as data): a range, a choice list or
    the sampler changing what the seed draws is reported with the parameter and both values."""
    from solvers.bank import load_bank
    from solvers.engine import VariantCode, make_variant

    write(tmp_path, "pinned", UNPINNED)
    drawn = {p.name: p.raw for p in make_variant(load_bank(tmp_path), catalog, VariantCode.parse("pinned@3")).params}
    entry = "  - variant: 3\n    draws: {{batch: {batch}, gpu: {gpu}}}\n    why: Seed 3 as drawn.\n"
    right = entry.format(batch=drawn["batch"], gpu=drawn["gpu"])
    wrong = entry.format(batch=drawn["batch"] + 1, gpu=drawn["gpu"])
    write(tmp_path, "pinned", UNPINNED + "golden:\n" + right + wrong)
    path = tmp_path / "pinned.yaml"
    golden = path.read_text().splitlines().index("golden:") + 1
    problems = [p for p in validate([tmp_path], catalog, seeds=0) if "golden" in p]
    assert problems == [f"{path}:{golden + 4}: golden[1].draws.batch: pinned@3 draws {drawn['batch']!r}, the file "
                        f"pins {drawn['batch'] + 1!r} (a range, a choice list or the sampler changed what this seed "
                        "draws)"], problems


def test_golden_tolerance_whole_numbers_exact_decimals_to_a_thousandth_or_the_entrys_rel(tmp_path, catalog):
    """The default's crossover is 221.508 tokens: 221.5 passes at 1e-3, 221 (whole) must be exact, 218 passes
    only with the entry's own rel: 0.02."""
    def problems(expect: str) -> list[str]:
        write(tmp_path, "pinned", UNPINNED + f"golden:\n  - variant: default\n    {expect}\n    why: by hand\n")
        return [p for p in validate([tmp_path / "pinned.yaml"], catalog, seeds=0) if "golden" in p]

    assert problems("expect: {crossover: 221.5, regime: memory-bound}") == []
    assert problems("expect: {crossover: 221.2}") != []
    assert [p.split(": ", 2)[2] for p in problems("expect: {crossover: 221}")] == [
        "pinned@default: the solver gives 221.5075 tokens, the file pins 221 tokens"]
    assert problems("expect: {crossover: 218}\n    rel: 0.02") == []


def test_strict_asks_every_question_for_its_default_pinned(tmp_path, catalog):
    write(tmp_path, "unpinned", UNPINNED)
    other = "golden:\n  - {variant: default+batch=64, expect: {crossover: 221.5}, why: the same GPU}\n"
    write(tmp_path, "other", UNPINNED + other)
    lenient = validate([tmp_path], catalog, seeds=0)
    strict = [p for p in validate([tmp_path], catalog, seeds=0, strict=True) if "golden" in p]
    assert not any("golden" in p for p in lenient)
    assert [p.split("/")[-1] for p in strict] == [
        f"{name}.yaml: golden: the default variant is not pinned (add an entry with variant: default, its keys "
        "derived by hand)" for name in ("other", "unpinned")]


def test_a_solver_is_found_by_convention_and_a_redundant_field_is_reported(tmp_path, catalog):
    """No `solver:` means solvers/topics/<topic>/<id>.py; naming that same module is reported as noise."""
    (tmp_path / "weight-read-intensity.yaml").write_text(SOURCE)
    write(tmp_path, "stray", SOURCE, solver="")
    write(tmp_path, "noisy", SOURCE, solver="roofline.noisy")
    problems = validate([tmp_path], catalog, seeds=2)
    assert not [p for p in problems if "weight-read-intensity.yaml" in p]
    assert any("stray.yaml: solver: no solve(p, s) in solvers/topics/roofline/stray.py" in p for p in problems)
    assert any("noisy.yaml: solver: 'roofline.noisy' is where the convention puts it" in p for p in problems)


LEVERS = "Which of these would raise this decode step's tokens/s by {raise_by} or more?"


def test_a_figure_typed_in_a_label_is_refused_and_a_field_or_a_declared_name_is_not(tmp_path, catalog):
    """A threshold typed in a label can disagree with the one the solver compares against (the label said 5%,
    the solver 2%): validate refuses a digit outside a {field}, unless it is part of a name, a word that
    starts with a letter (fp8) or a text the question declares under literals:."""
    write(tmp_path, "field", SOURCE)
    write(tmp_path, "typed", SOURCE.replace(LEVERS, LEVERS.replace("{raise_by}", "25%")))
    named = SOURCE.replace(LEVERS, "Which of these would raise TP 4's tokens/s by {raise_by} or more?")
    write(tmp_path, "undeclared", named)
    write(tmp_path, "declared", named.replace("\nanswers:\n", '\nliterals: ["TP 4"]\nanswers:\n', 1))
    problems = [p for p in validate([tmp_path], catalog, seeds=0) if "types a figure" in p]
    assert sorted(Path(p.split(":")[0]).name for p in problems) == ["typed.yaml", "undeclared.yaml"]
    assert all("answers.levers:" in p and "{field}" in p and "literals:" in p for p in problems)


def test_a_field_must_name_a_parameter_and_a_choice_takes_none(tmp_path):
    from solvers.bank import QuestionError, read_question

    write(tmp_path, "stray", SOURCE.replace("{raise_by} or more", "{gain} or more"))
    with pytest.raises(QuestionError, match=r"field \{gain\} names no parameter"):
        read_question(tmp_path / "stray.yaml")
    regimes = "choice: [memory-bound, compute-bound]}"
    write(tmp_path, "chosen", SOURCE.replace(regimes, 'choice: [memory-bound, "{tp}-bound"]}'))
    with pytest.raises(QuestionError, match="a choice is a name"):
        read_question(tmp_path / "chosen.yaml")


STAGED = Path("tests/fixtures/staged")


def _staged_problems(tmp_path: Path, name: str, text: str, catalog, seeds: int = 5, strict: bool = True) -> list[str]:
    """validate on a staged fixture written as `text` under its own name (the id follows the file)."""
    (tmp_path / f"{name}.yaml").write_text(text.replace("id: staged-stuck", f"id: {name}", 1))
    return validate([tmp_path / f"{name}.yaml"], catalog, seeds=seeds, strict=strict)


def test_a_staged_file_breaking_the_stage_bar_is_refused_naming_each_stage(catalog):
    """staged-bar opens in more than 4 lines, goes on in more than 3, asks 5 answers in one stage, names a
    card, and pushes to TP 1, which realism refuses for a model too large for one GPU: strict names each
    stage and the refusing constraint; the lenient check names none."""
    from solvers.bank import read_question
    from solvers.engine import VariantCode, make_variant
    from solvers.interview import stage_run
    from solvers.realism import broken
    from solvers.stagebar import text_lines
    from solvers.validate import read_questions

    strict = validate([STAGED / "staged-bar.yaml"], catalog, seeds=5, strict=True)
    bar = [line.split(": ", 1)[1] for line in strict if ": stages" in line]
    assert not [line for line in validate([STAGED / "staged-bar.yaml"], catalog, seeds=5) if ": stages" in line]
    assert any(line.startswith("stages[2]: asks 5 answers (at most 4)") for line in bar), bar
    assert any(line.startswith("stages[2].say: names the conventions card(s) usable-hbm") for line in bar), bar
    bank = read_questions([STAGED / "staged-bar.yaml"])[0]
    for index, limit in ((0, 4), (1, 3)):
        said = next(line for line in bar if line.startswith(f"stages[{index}].say: "))
        lines, code = int(said.split(": ")[1].split()[0]), said.split("(")[1].split(")")[0]
        assert said.endswith(f"over {limit}") and lines > limit
        solution = make_variant(bank, catalog, VariantCode.parse(code))
        assert text_lines(stage_run(solution, catalog, index).say) == lines  # the draw named has those lines
    question = read_question(STAGED / "staged-bar.yaml")
    checked = [make_variant(bank, catalog, VariantCode(question.id, seed)) for seed in (None, *range(5))]
    tp_one = sum(broken(question.constraints, {p.name: p.value for p in s.params} | {"tp": 1}) is not None
                 and s.param("tp").raw != 1 for s in checked)
    refused = [line for line in bar if line.startswith("stages[3].set: refused")]
    assert tp_one > 0.1 * len(checked) and refused == [
        f"stages[3].set: refused in {tp_one} of {len(checked)} draws (at most 10%) by weights-fit ({tp_one})"]


def test_a_push_that_cannot_cross_fails_unless_it_is_a_nudge(tmp_path, catalog, monkeypatch):
    monkeypatch.setattr("solvers.variety.DRAWS", 20)  # the stages' bar runs over the seeds; the sweep is not asked
    text = (STAGED / "staged-stuck.yaml").read_text()
    stuck = [p for p in _staged_problems(tmp_path, "stuck", text, catalog) if "stages[3]" in p]
    assert len(stuck) == 1 and "stages[3]: the push crosses the regime boundary in 0 of 6 draws" in stuck[0]
    nudge = text.replace("  - push: generated\n", "  - push: generated\n    nudge: the regime cannot move here\n")
    assert nudge != text
    assert not [p for p in _staged_problems(tmp_path, "nudged", nudge, catalog) if "stages[" in p]
    pushless = text.split("  - push: generated\n")[0] + "parameters:" + text.split("\nparameters:", 1)[1]
    assert any(p.endswith("stages: no push (a stage with set: or push: generated)")
               for p in _staged_problems(tmp_path, "pushless", pushless, catalog, seeds=0))


def test_a_staged_file_of_more_than_four_turns_is_a_worksheet_again(tmp_path, catalog):
    """staged-stuck's third stage split in three makes six turns: strict names the count; its four pass."""
    text = (STAGED / "staged-stuck.yaml").read_text()
    third = text.split("  - say: |\n      Your TPOT target")[1].split("  - push: generated")[0]
    assert "ask: [batch_tpot, served, regime, levers]" in third
    split = third.replace("    ask: [batch_tpot, served, regime, levers]\n",
                          "    ask: [batch_tpot]\n  - say: And served?\n    ask: [served]\n"
                          "  - say: What caps it, and which would serve more?\n    ask: [regime, levers]\n")
    longer = text.replace(third, split)
    turns = [p for p in _staged_problems(tmp_path, "long", longer, catalog, seeds=0) if ": stages: " in p]
    assert len(turns) == 1 and "stages: 6 turns (from 2 to 4" in turns[0], turns
    assert not [p for p in _staged_problems(tmp_path, "four", text, catalog, seeds=0) if "turns (from" in p]


def test_variety_names_each_few_valued_number_unless_declared_a_lookup_and_too_few_variants(tmp_path, catalog):
    """staged-stuck draws one model on one GPU, three contexts and two TPOT targets: six variants in all;
    its KV per token is one value, declared a lookup; KV per request takes the three contexts' values."""
    text = (STAGED / "staged-stuck.yaml").read_text()
    problems = _staged_problems(tmp_path, "stuck", text, catalog, seeds=0)
    few = {p.split("answers.")[1].split(":")[0] for p in problems if "distinct values in 200 draws" in p}
    assert "kv_per_request" in few and "kv_per_token" not in few
    assert any(p.endswith("variants: only 6 distinct in 4000 draws (at least 200)") for p in problems)
    fp8_kv = "answers.levers: 'an fp8 KV cache (half the bytes per token)' holds in all 200 draws"
    assert any(fp8_kv in p for p in problems)
    undeclared = text.replace(', lookup: "the one model\'s config fixes it"', "")
    assert undeclared != text
    problems = _staged_problems(tmp_path, "undeclared", undeclared, catalog, seeds=0)
    assert any("answers.kv_per_token: 1 distinct values in 200 draws (131072)" in p for p in problems)
    assert not [p for p in _staged_problems(tmp_path, "lenient", text, catalog, seeds=0, strict=False)
                if "distinct" in p]


def test_a_lookup_is_a_number_with_a_reason(tmp_path):
    from solvers.bank import QuestionError, read_question

    text = (STAGED / "staged-stuck.yaml").read_text()
    assert read_question(STAGED / "staged-stuck.yaml").lookups == (("kv_per_token", "the one model's config fixes it"),)
    for name, broken_text in (("empty", text.replace("the one model's config fixes it", " ")),
                              ("choice", text.replace("choice: [capacity-limited, latency-limited]}",
                                                      'choice: [capacity-limited, latency-limited], lookup: "x"}'))):
        assert broken_text != text
        (tmp_path / f"{name}.yaml").write_text(broken_text.replace("id: staged-stuck", f"id: {name}"))
        with pytest.raises(QuestionError, match=r"answers\[\d\]\.lookup: a number's reason"):
            read_question(tmp_path / f"{name}.yaml")


def test_a_regime_within_its_answers_tolerance_of_the_boundary_is_a_knife_edge_unless_the_tie_rule_is_said(
        bank, catalog):
    """kv-bytes-per-token's pinned knife edge: 3 requests fit and 3 fit the TPOT (margin 1). Its stage says
    what equal caps are called; without those words the draw is a knife edge, named by its code; a draw far from
    the boundary is none."""
    from dataclasses import replace

    from solvers.engine import VariantCode, make_variant
    from solvers.variety import knife_edges

    question = bank.get("kv-bytes-per-token")
    edge = make_variant(bank, catalog, VariantCode.parse(
        "kv-bytes-per-token@default+context=130048+gpu=a100-sxm-80gb+tp=4+tpot=46"))
    far = make_variant(bank, catalog, VariantCode(question.id, None))
    assert edge.sheet.regime.margin == 1 and abs(far.sheet.regime.margin - 1) > 0.03
    assert knife_edges(question, [edge, far]) == []
    rule = re.compile(r" \(if the two caps tie,\s+call it [a-z-]+\)")
    untied = replace(question, stages=tuple(replace(s, say=rule.sub("", s.say),
                                                    hints=tuple(h for h in s.hints if "tie" not in h))
                                            for s in question.stages))
    found = knife_edges(untied, [far, edge, far])
    assert [(f.kind, f.key) for f in found] == [("knife edge", "regime")]
    assert f"in 1 of 3 draws ({edge.code}, margin 1)" in found[0].text
    assert knife_edges(untied, [far, far]) == []


@pytest.mark.parametrize("hits", [3, 4])
def test_a_number_zero_or_a_parameter_in_more_than_30_percent_of_draws_gives_itself_away(bank, catalog, hits):
    """Of ten draws, three whose users equal the TP degree or zero pass (30%); four do not."""
    from dataclasses import replace

    from solvers.engine import VariantCode, make_variant
    from solvers.variety import number_findings

    question = bank.get("kv-bytes-per-token")
    draws = [make_variant(bank, catalog, VariantCode(question.id, seed)) for seed in range(10)]
    draws = [replace(s, expected=s.expected | {"users": float(s.param("tp").raw) if i % 2 else 0.0})
             if i < hits else s for i, s in enumerate(draws)]
    trivial = [f for f in number_findings(question, draws) if f.kind == "mostly trivial"]
    assert [f.key for f in trivial] == (["users"] if hits > 3 else [])
    if trivial:
        zeros = (hits + 1) // 2  # the even draws of the first `hits`
        assert trivial[0].text == f"zero in {zeros} and a parameter's value in {hits - zeros} of 10 draws " \
                                  "(together at most 30%)"


def test_validate_notes_the_old_shape_and_reports_variety_on_request(tmp_path, capsys):
    from tests.test_cli import run_cli

    write(tmp_path, "old", SOURCE)
    (tmp_path / "staged-stuck.yaml").write_text((STAGED / "staged-stuck.yaml").read_text())
    code, out, err = run_cli(capsys, "validate", "--seeds", "0", str(tmp_path))
    assert "1 file(s) in the old shape" in err and f"  {tmp_path / 'old.yaml'}\n" in err
    old_shape = err.split("old shape")[1].split("no published measurement")[0]
    assert "staged-stuck.yaml\n" not in old_shape and "Variety" not in err
    assert "old.yaml" not in out  # a note, not a problem
    code, out, err = run_cli(capsys, "validate", "--seeds", "0", "--variety", str(tmp_path))
    header = next(line for line in err.splitlines() if line.startswith("Variety over 200 draws ("))
    listed = [line for line in err.splitlines() if line.startswith("  ") and line.endswith("]")]
    counted = {said: int(n) for n, said in (part.split(" ", 1) for part in header.split("(", 1)[1].split(";")[0]
                                            .split(", "))}
    assert sum(counted.values()) == len(listed) and counted["questions short of 200 variants"] == 1
    assert any("staged-stuck.yaml: answers.kv_per_request: 3 distinct values" in line for line in listed)
    assert not [line for line in out.splitlines() if "distinct values" in line]  # lenient: a report only


@pytest.mark.parametrize("facts", [1, 2])
def test_a_select_declares_at_most_one_fact(bank, catalog, facts):
    from solvers.engine import VariantCode, make_variant
    from solvers.variety import option_findings

    draws = [make_variant(bank, catalog, VariantCode("kv-bytes-per-token", seed)) for seed in range(10)]
    for solution in draws:
        solution.sheet.facts["levers"] = set(list(solution.sheet.judged("levers"))[:facts])
    found = [f for f in option_findings(draws) if f.kind == "declared facts"]
    wanted = [("levers", "2 declared facts (at most 1 a select)")] if facts > 1 else []
    assert [(f.key, f.text) for f in found] == wanted


def _draws(*pairs: tuple[float, float]) -> list:
    """Solutions as repeated_facts reads them: each draw's sheet states TP as 'n' and again as 'TP'."""
    from types import SimpleNamespace

    from solvers.derivation import Given

    return [SimpleNamespace(sheet=SimpleNamespace(givens=[Given("n", "TP size", n, ""), Given("L", "layers", 80, ""),
                                                          Given("TP", "GPUs in the TP group", tp, "GPUs")]))
            for n, tp in pairs]


def test_one_fact_under_two_symbols_is_flagged_only_where_it_cannot_be_a_coincidence():
    from solvers.validate import repeated_facts

    (line,) = repeated_facts(_draws((2, 2), (4, 4), (8, 8)))
    assert "'n' (TP size) and 'TP' (GPUs in the TP group) are one fact in all 3 draws" in line
    assert repeated_facts(_draws((8, 8), (8, 8), (8, 8))) == []  # never varies: 8 heads and TP 8 may just agree
    assert repeated_facts(_draws((2, 2), (4, 4))) == []  # too few draws to tell
    assert repeated_facts(_draws((2, 2), (4, 4), (8, 4))) == []  # they differ once: two facts


def test_what_the_bank_knows_is_named_not_typed():
    """Strict: 0.9 beside an HBM figure, in a constraint or a stage's words or hints, and a second KV formula."""
    from dataclasses import replace

    from solvers.bank import Stage, parse_question
    from solvers.realism import declared
    from solvers.validate import typed_conventions

    question = parse_question(Path("questions/F/weight-read-intensity.yaml"), SOURCE)
    assert typed_conventions(question) == []
    names = {p.name for p in question.parameters}
    typed = replace(question, constraints=(
        declared("fits", "model.params_b * 2e9 <= 0.9 * tp * hbm(gpu)", names),
        declared("kv", "batch * 2 * model.layers * model.kv_heads * model.head_dim * 2 < 1e12", names),
        declared("hits", "batch * 0.9 < 1000", names)),  # a 0.9 that is not the share of HBM
        stages=(Stage("opening", "Each GPU keeps 0.9·HBM for the engine.", ("crossover",), ("Use HBM × 0.9.",)),))
    found = "\n".join(typed_conventions(typed))
    assert "constraints.fits: types the usable-HBM share" in found and "constraints.hits" not in found
    assert "constraints.kv: derives KV bytes per token again" in found
    assert "stages[0]: types" in found and "stages[0].hints: types" in found


def test_an_answer_only_a_push_asks_is_judged_on_the_pushed_variants(tmp_path, bank, catalog):
    """kv-bytes-per-token with `served` asked by its push alone: the sweep judges `served` over the pushed
    variants (the only ones a candidate meets it on) and every other answer over the draws, so a pushed
    set with one value is a lookup and a draw set with one value is no longer `served`'s concern."""
    from solvers import variety
    from solvers.bank import parse_question, questions_dir
    from solvers.engine import VariantCode, make_variant

    text = (questions_dir() / "F" / "kv-bytes-per-token.yaml").read_text()
    text = text.replace("ask: [batch_tpot, served, regime, levers]", "ask: [batch_tpot, regime, levers]", 1)
    question = parse_question(tmp_path / "kv-bytes-per-token.yaml", text)
    assert question.push_only == {"served"}
    varied = [make_variant(bank, catalog, VariantCode("kv-bytes-per-token", seed)) for seed in range(1, 25)]
    varied = [s.__class__(**{**s.__dict__, "question": question}) for s in varied]
    one = [varied[0]] * len(varied)

    def few(draws, pushed):
        found = variety.findings(question, draws, variety.MIN_VARIANTS, pushed)
        return {f.key for f in found if f.kind == "few values"}

    assert "served" in few(varied, one) and "kv_per_token" not in few(varied, one)
    assert "served" not in few(one, varied) and "kv_per_token" in few(one, varied)
    assert "served" in few(one, ())  # no pushed variants given: judged over the draws, as before


def test_a_push_only_key_that_never_moves_fails_strict_only_if_the_pushed_variants_agree(bank, catalog, monkeypatch):
    """continuous-batching-padding's lever is asked only by its push and keys one way in nearly every draw as drawn,
    but varies over the pushed variants a candidate meets: it passes. Keyed one way on the pushed variants too, it is
    a graded answer that barely depends on the variant, and strict says so."""
    import solvers.topics.serving.continuous_batching_padding as padding
    import solvers.validate as validate_module

    question = bank.get("continuous-batching-padding")
    assert "lever" in question.push_only

    def flagged() -> bool:
        problems = validate_module.check_question(question, bank, catalog, seeds=50, strict=True)
        return any("answers.lever: one key in" in line for line in problems)

    assert not flagged()
    monkeypatch.setattr(padding, "_choose_lever", lambda s, c, t, gain: s.choose("lever", "overlap-it", "always"))
    assert flagged()
