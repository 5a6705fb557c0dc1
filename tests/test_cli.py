"""The command line: list, solve, check; bad input gives one line on stderr and exit 2."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tui.cli import main


def run_cli(capsys, *argv):
    try:
        code = main(list(argv))
    except SystemExit as exit_:
        code = exit_.code
    out, err = capsys.readouterr()
    return code, out, err


def test_list(capsys):
    code, out, _ = run_cli(capsys, "list", "--json")
    rows = json.loads(out)
    assert code == 0 and {"weight-read-intensity", "kv-bytes-per-token"} <= {r["id"] for r in rows}


def test_list_aligns_every_column(capsys):
    """The title starts in one column however long the topic ('speculation' ran into its title)."""
    code, out, _ = run_cli(capsys, "list")
    starts = {len(line) - len(line.split(None, 3)[3]) for line in out.splitlines()}
    assert code == 0 and len(starts) == 1, starts


def test_solve_json_shape(capsys):
    code, out, _ = run_cli(capsys, "solve", "kv-bytes-per-token", "--default", "--json")
    data = json.loads(out)
    assert code == 0
    assert data["code"] == "kv-bytes-per-token@default" and data["seed"] is None
    assert data["parameters"]["context"]["value"] == 8192
    answers = {a["key"]: a for a in data["answers"]}
    expected = {"key": "kv_per_token", "label": "KV bytes per token", "kind": "number", "value": 320.0,
                "unit": "KiB", "si": 327_680.0,
                "slips": [{"gives": "4 KiB", "mistake": "x layers: one layer's KV instead of all of them"},
                          {"gives": "160 KiB", "mistake": "x2: K and V counted once"}]}
    assert answers["kv_per_token"] == expected and data["schema"] == 5
    assert data["steps"] and data["regime"]["name"] == "capacity-limited"
    assert [s["kind"] for s in data["stages"]] == ["opening", "ask", "ask", "push"]
    push = data["stages"][3]  # the default's 50 ms target tightened until the step, not memory, caps it
    assert list(push["set"]) == ["tpot"] and push["set"]["tpot"] < 50 and push["regime"] == "latency-limited"
    assert push["code"] == f"kv-bytes-per-token@default+tpot={push['set']['tpot']}"


def test_solve_markdown_and_set(capsys):
    code, out, _ = run_cli(capsys, "solve", "kv-bytes-per-token", "--seed", "3", "--set", "context=4096", "--markdown")
    assert code == 0 and out.startswith("# ") and "## Regime" in out and "4,096 tokens" in out


@pytest.mark.parametrize("code", ["kv-bytes-per-token@default", "kv-bytes-per-token@17", "weight-read-intensity@8"])
def test_solve_markdown_reads_the_interview_stage_by_stage(capsys, bank, catalog, code):
    """Each stage's words, then its keys with their why, in the order the interview asks them."""
    from solvers.engine import VariantCode, make_variant
    from solvers.script import script

    made = script(make_variant(bank, catalog, VariantCode.parse(code)), catalog)
    status, out, _ = run_cli(capsys, "solve", code, "--markdown")
    assert status == 0
    said = [text for stage in made.stages if stage.run
            for text in (stage.run.say, *(line for _, line in stage.run.key_lines()))]
    assert len(said) > len(made.stages)
    at = 0
    for text in said:  # each found after the one before
        at = out.index(text, at) + len(text)


def test_check_exit_codes(capsys):
    right = ["kv_per_token=320 KiB", "kv_per_request=2.5 GiB", "users=176", "tpot_fit=34.01 ms", "batch_tpot=294",
             "served=176", "regime=capacity", "levers=AD"]
    code, out, _ = run_cli(capsys, "check", "kv-bytes-per-token", "--default", *right)
    assert code == 0 and out.count("correct") == 8
    code, out, _ = run_cli(capsys, "check", "kv-bytes-per-token", "--default", "kv_per_token=640 KiB")
    assert code == 1 and "x2" in out


@pytest.mark.parametrize("argv, message", [
    (("solve", "no-such-id", "--seed", "1"), "unknown question"),
    (("solve", "kv-bytes-per-token", "--seed", "-4"), "seed must be"),
    (("solve", "kv-bytes-per-token", "--seed", "x"), "invalid int"),
    (("solve", "kv-bytes-per-token", "--set", "context"), "NAME=VALUE"),
    (("solve", "kv-bytes-per-token", "--set", "context=fast"), "context"),
    (("check", "kv-bytes-per-token", "--default", "nope=1"), "no answer 'nope'"),
    (("check", "kv-bytes-per-token"), "needs --seed"),
    (("solve", "kv-bytes-per-token@zz"), "not a variant code"),
])
def test_bad_input_one_line_exit_2(capsys, argv, message):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and out == ""
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_console_script_runs_from_another_directory(tmp_path):
    env = dict(os.environ, INFRADRILL_CONFIG_DIR=str(tmp_path))
    result = subprocess.run([sys.executable, "-m", "tui.cli", "list"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0 and "weight-read-intensity" in result.stdout


def test_a_closed_pipe_ends_the_command_quietly():
    """`infradrill list | head`: the reader goes away; no 'internal error', exit 0."""
    import subprocess
    import sys

    process = subprocess.Popen([sys.executable, "-m", "tui.cli", "list"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    process.stdout.close()
    error = process.stderr.read().decode()
    assert process.wait() == 0 and error == ""


def test_the_app_without_a_terminal_says_so_and_exits_2(capsys):
    """stdin is not a terminal under pytest: the full-screen app must not start into a file."""
    from tui.cli import main

    assert main([]) == 2
    assert "needs an interactive terminal" in capsys.readouterr().err


def test_solve_reads_only_its_question_and_what_it_requires(capsys, monkeypatch):
    import solvers.bank

    read = []
    real = solvers.bank.read_question
    monkeypatch.setattr(solvers.bank, "read_question", lambda path: read.append(path.stem) or real(path))
    code, out, _ = run_cli(capsys, "solve", "paged-block-size", "--default")
    assert code == 0 and "paged-block-size@default" in out
    assert sorted(read) == ["kv-bytes-per-token", "paged-block-size"]


def test_version_prints_the_installed_version(capsys):
    from importlib.metadata import version

    code, out, _ = run_cli(capsys, "--version")
    assert code == 0 and out.strip() == f"infradrill {version('infradrill')}"


def test_check_json_gives_each_grade_and_the_exit_code(capsys):
    code, out, _ = run_cli(capsys, "check", "kv-bytes-per-token", "--default", "kv_per_token=320 KiB", "--json")
    data = json.loads(out)
    assert code == 1 and data["code"] == "kv-bytes-per-token@default" and data["correct"] is False
    first = data["answers"][0]
    assert (first["key"], first["typed"], first["verdict"]) == ("kv_per_token", "320 KiB", "correct")
    assert {a["verdict"] for a in data["answers"][1:]} == {"unparsed"}  # not given: nothing to read


def _overrides(question):
    """One override text of each kind a person types with --set, for each parameter that takes one: every
    choice of a choice (a catalogue name, a number, a phrase with spaces and commas), and a number with its
    unit after a space, one with a signed exponent, and a bare one."""
    from solvers.params import Choice, Ranged

    for spec in question.parameters:
        if isinstance(spec, Choice):
            yield from ((spec.name, str(choice)) for choice in spec.choices)
        elif isinstance(spec, Ranged) and spec.unit:
            yield from ((spec.name, text) for text in (f"{spec.default:g} {spec.unit}",
                                                        f"{spec.default:.3e}"  # signed: 5.000e+01
                                                        if not spec.whole else f"{spec.default}"))


@pytest.mark.parametrize("qid", ["model-runner-v2", "kv-bytes-per-token", "fp8-scale-formats",
                                 "voice-latency-budget", "cost-audit-rollout"])
def test_every_code_the_app_prints_solves_to_the_same_variant(bank, catalog, qid):
    """A --set value with a space, a comma or a '+' ('features=prefix caching, structured outputs', '2 ms',
    '1.2e+03') used to be printed into the code as typed, which `solve` then refused; the printed code now
    solves, to the same variant. A follow-up's or what-if's code (revise) likewise."""
    from solvers.derivation import Reject
    from solvers.engine import VariantCode, VariantError, make_variant, revise
    from solvers.params import Choice, ParameterError

    question, tried = bank.get(qid), 0
    for name, text in _overrides(question):
        try:
            solution = make_variant(bank, catalog, VariantCode(qid, 3, ((name, text),)))
        except VariantError:
            continue  # a value this draw refuses: nothing printed
        again = make_variant(bank, catalog, VariantCode.parse(str(solution.code)))
        assert again.expected == solution.expected and again.params == solution.params, (name, text)
        tried += 1
    assert tried >= 3
    base = make_variant(bank, catalog, VariantCode(qid, None))
    for spec in (spec for spec in question.parameters if isinstance(spec, Choice)):
        for choice in spec.choices:
            try:
                pushed = revise(base, catalog, {spec.name: choice})
            except (Reject, ParameterError):  # a refused push prints no code
                continue
            assert make_variant(bank, catalog, VariantCode.parse(str(pushed.code))).expected == pushed.expected


def test_every_choice_reads_back_from_its_code_text(bank, catalog):
    """Bank-wide, no solve: each choice's text in a code fits a code and names that choice alone."""
    from solvers.engine import VariantCode
    from solvers.params import Choice, in_a_code

    for question in bank.questions.values():
        for spec in (spec for spec in question.parameters if isinstance(spec, Choice)):
            for choice in spec.choices:
                text = spec.override_text(choice)
                assert in_a_code(text) and spec.parse_override(text, catalog) == choice, (question.id, choice)
                assert VariantCode.parse(f"{question.id}@1+{spec.name}={text}").overrides == ((spec.name, text),)
