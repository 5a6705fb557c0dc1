"""Floors, ceilings and comparisons are decided on exact values, not floats."""
from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest
import sympy

from solvers.bank import load_bank
from solvers.derivation import Sheet
from solvers.engine import VariantCode, make_variant

BANK = load_bank()
DIGITS = 50


def test_a_product_that_is_whole_floors_to_itself():
    s = Sheet()
    m = s.given("m", 0.3, "%")
    H = s.given("H", 45, "h")
    o = s.given("o", 2, "h")
    assert 4 * (45 * (1 - 0.3) - 2) < 118  # 117.99999999999999 in floats
    F = s.step("F", "focus", "F", 4 * (H * (1 - m) - o), "h")
    n = s.step("n", "whole", "n", sympy.floor(F / 2), "")
    assert s.value(F) == 118 and s.value(n) == 59
    assert s.compare(F, 118) == 0 and s.compare(F, 117.999) == 1


def test_compare_calls_a_tie_a_tie():
    s = Sheet()
    a = s.given("a", 0.3)
    b = s.given("b", 0.1)
    assert s.compare(a, 3 * b) == 0  # 0.1 * 3 != 0.3 in floats
    assert s.compare(sympy.sqrt(2) * sympy.sqrt(2), 2) == 0


def _snapped(x: sympy.Number, rounding) -> sympy.Integer:
    """At 50 digits an exact tie may land a hair either side: within 1e-30 of a whole number is it."""
    nearest = sympy.Integer(round(x))
    return nearest if abs(x - nearest) < 1e-30 else sympy.Integer(rounding(x))


class _Floor(sympy.Function):
    @classmethod
    def eval(cls, x):
        return _snapped(x, math.floor) if x.is_Number else None


class _Ceiling(sympy.Function):
    @classmethod
    def eval(cls, x):
        return _snapped(x, math.ceil) if x.is_Number else None


def _high_precision(sheet: Sheet) -> dict[sympy.Symbol, sympy.Float]:
    """Every given and step re-evaluated independently in 50-digit floats (no rationals), from
    the givens as decimals (35% is 0.35, not the 0.35000000000000003 that 35 x 0.01 gives)."""
    values = {sympy.Symbol(g.symbol): sympy.Float(f"{g.value:.15g}", DIGITS) for g in sheet.givens}
    for step in sheet.steps:
        if step.expr is not None:
            expr = sympy.sympify(step.expr).replace(sympy.floor, _Floor).replace(sympy.ceiling, _Ceiling)
            value = sympy.sympify(expr.xreplace(values)).evalf(DIGITS)
            # A helper that floats cannot take (an lcm) keeps the sheet's value: the floors after it still check.
            values[sympy.Symbol(step.symbol)] = value if value.is_real else sympy.Float(step.value, DIGITS)
    return values


def _decides(expr) -> bool:
    return bool(expr.atoms(sympy.floor, sympy.ceiling))


@pytest.mark.parametrize("qid", sorted(BANK.questions))
def test_every_floor_and_ceiling_of_the_bank_matches_a_50_digit_evaluation(bank, catalog, qid):
    for seed in [None, *range(40)]:
        solution = make_variant(bank, catalog, VariantCode(qid, seed))
        sheet = solution.sheet
        deciding = [s for s in sheet.steps if s.expr is not None and _decides(sympy.sympify(s.expr))]
        if not deciding:
            continue
        precise = _high_precision(sheet)
        for step in deciding:
            assert step.value == pytest.approx(float(precise[sympy.Symbol(step.symbol)]), rel=1e-12), \
                (f"{qid}@{seed}", step.key, step.value)


def test_at_an_exact_tie_ib_vs_roce_does_not_call_either_cheaper(bank, catalog):
    tie = "ib-vs-roce@default+gpus=1600+ib_switch=40000+eth_switch=20000+roce_extra=1+staff_cost=300000+years=5"
    solution = make_variant(bank, catalog, VariantCode.parse(tie))
    expected, regime = solution.expected, solution.sheet.regime
    assert solution.sheet.results["flip_fleet"] == 1600 and expected["ib_per_gpu"] == expected["roce_per_gpu"]
    assert regime.name == "small-fleet-infiniband" and "exactly the same" in regime.summary
    one_more = make_variant(bank, catalog, VariantCode.parse(tie.replace("gpus=1600", "gpus=1700")))
    assert one_more.sheet.regime.name == "large-fleet-roce"


# --- no float comparison decides an answer --------------------------------------------------------
# Key check 2 (spec-decode-exactness@254): two acceptance rates both 0.789, the first summed in floats to
# 0.7890000000000001, so "the FP8 drafter lowers the acceptance rate" was keyed as holding. A graded answer
# or an option's truth is decided by s.compare / regime_by / floor_of on the sheet's exact values. The scan
# below finds every comparison in the bank's solvers whose operands are floats (Sheet.value, evaluate or
# number, sum(), float(), or a name assigned from one of them), outside a refusal (`raise`, or an `if` that
# only raises). Each one it finds is decided exactly instead, or listed here with why it decides nothing.

SOLVERS = Path(__file__).resolve().parent.parent / "solvers"
ORDERINGS = (ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq)
FLOAT_METHODS = {"value", "evaluate", "number"}  # a Sheet's float of a given or step
FLOAT_BUILTINS = {"sum", "float"}

WHOLE = "whole numbers (counts, floors, a batch): a float holds them exactly"
TEXT = "picks the words of a why line or a summary; the answer itself is decided on the exact path"
SLIP = "decides whether a slip is offered, not an answer"
NAMES = "compares names, indices or flags, not numbers"
SAMPLED = "a seeded simulation's own sampled numbers: there is no exact value to decide on"
REGION = "which region's linear root to keep: at a region's edge both regions give the same root"
UNLISTED = ("an option within the answers' 3% of its line is judged None and never listed; a listed option's truth "
            "is decided by s.compare")


def _margin(what: str) -> str:
    return f"the draw is refused within {what} of this line, so floats and exact values decide alike"


_SM_PROBE = ("a refusal probe: whether the split's whole-step speed-up beats the line, recomputed with one SM "
             "streaming 60, 80 and 120 GB/s, a draw refused where they differ; the keyed verdict is regime_by on "
             "the sheet's speed-up")

_UNLISTS = ("another reading (the simulation's cut) on the other side of the line "
            "only unlists the option; a listed option's truth is decided by s.compare")

_PD_UNLISTS = ("a changed flow within 10% (TOO_CLOSE) of its link is judged None and never listed (one NIC runs "
               "at 87-100% of line rate); a listed option's truth is decided by s.compare")

ALLOWED = {
    ("topics/calibration/moe_calibration_starvation.py", "_recipe", "damped <= 1 + p.damp_within"): SAMPLED,
    ("topics/kv_cache/cow_block_sharing.py", "solve", "s.value(tail) > 0"): SLIP,
    ("topics/kvtransfer/pd_transfer_bandwidth.py", "_link_breakers",
     "abs(s.evaluate(after / nic) - 1) < TOO_CLOSE"): _PD_UNLISTS,
    ("topics/kvtransfer/pd_transfer_bandwidth.py", "verdict",
     "abs(s.evaluate(after / nic) - 1) < TOO_CLOSE"): _PD_UNLISTS,  # the same line, seen from its closure
    ("topics/kv_cache/paged_block_size.py", "_block_choices",
     "abs(s.evaluate(share(size)) / s.value(tau) - 1) <= TOO_CLOSE"):
        _margin("3% (TOO_CLOSE): at the drawn block always, at half and twice it where the select is asked; the "
                "options' truth and the regime are decided by s.compare and regime_by"),
    ("topics/quantization/kv_quant_keys_vs_values.py", "_kv_roads_regime",
     "abs(np.log(s.number('roads_channel'))) < np.log(REGIME_MARGIN)"):
        _margin("8% (REGIME_MARGIN) where the regime is asked; its side is decided by regime_by"),
    ("topics/roofline/datasheet_speedup_regimes.py", "_tpot_direction",
     "abs(s.value(cap_n) / s.value(cap_o) - 1) < TIE"):
        _margin("3% (TIE) where the TPOT's direction is asked; longer or shorter is decided by s.compare"),
    ("topics/roofline/datasheet_speedup_regimes.py", "_judge_over_bandwidth",
     "abs(s.value(speedups[name]) / s.value(r_bw) - 1) < TIE"):
        _margin("3% (TIE) where the select is asked; an option's truth is decided by s.compare"),
    ("topics/kv_cache/mla_tp_duplication.py", "solve", "abs(s.value(rate_dp) / s.value(rate_tp) - 1) < NEAR_TIE"):
        _margin("3% (NEAR_TIE) where the trade-offs are asked; which delivers more is decided by s.compare"),
    ("topics/quantization/fp8_attention_quant_points.py", "_near", "max(a, b) <= (1 + tolerance) * min(a, b)"):
        "an option within its figure's tolerance of its line is judged None and never listed; a listed option's "
        "truth is decided by s.compare",
    **{("topics/quantization/fp8_attention_quant_points.py", "_torn", torn): _UNLISTS for torn in (
        "(closed > line) != (other > line)", "closed > line")},
    ('topics/kv_cache/mla_tp_duplication.py', '_attention_judgements', 'then >= p.demand'): WHOLE,
    ('topics/quantization/kv_quant_keys_vs_values.py', 'solve', 'abs(estimate - 1) > 0.05'): SLIP,
    ('topics/cost/voice_latency_budget.py', '_voice_llm', 'tp > 1'): WHOLE,
    ('topics/deployment/h200_slower_than_h100.py', '_mechanisms', 'knobs.batch > B_o'): WHOLE,
    ('topics/deployment/h200_slower_than_h100.py', 'judge', 'max(g_ttft, g_tpot) >= line'):
        "an option whose what-if lands within 1% (NEAR_BAR) of its line is judged None and never listed; the float "
        "what-ifs match the sheet to 1e-9, so a listed option's side is the exact one",
    ('topics/deployment/h200_slower_than_h100.py', 'judge', 'abs(max(g_ttft, g_tpot) / line - 1) < NEAR_BAR'):
        "only whether an option is listed: a what-if 1% from the line lists or unlists it, never flips its truth",
    ('topics/deployment/h200_slower_than_h100.py', 'solve', 'B_n != B_o'): SLIP,
    ('topics/quantization/fp8_kv_cache.py', '_rounding_rms', 'magnitude < fmt.min_normal'): SAMPLED,
    ('topics/quantization/fp8_kv_cache.py', '_rounding_rms', 'magnitude >= fmt.min_normal'): SAMPLED,
    ("formulas/fp8.py", "sqnr_db", "noise == 0"): SAMPLED,
    ("topics/cost/serving_cost_ledger.py", "_ledger_levers", "cut >= LEVER_CUT"): _margin("a point (LEVER_MARGIN)"),
    ("topics/deployment/h200_slower_than_h100.py", "solve", "B_n > CAPTURE_LIMIT"): WHOLE,
    ("topics/deployment/h200_slower_than_h100.py", "solve", "B_o > CAPTURE_LIMIT"): WHOLE,
    ("topics/kv_cache/mla_tp_duplication.py", "_attention_judgements", "held_tp >= 2 * p.demand"): WHOLE,
    ("topics/kv_cache/mla_tp_duplication.py", "solve", "whole != s.value(req_dp)"): WHOLE,  # whether a slip differs
    ("topics/kv_cache/mla_tp_duplication.py", "solve", "whole > 0"): WHOLE,
    # requests on the node, G × ⌊…⌋ or G/TP × ⌊…⌋ (TP divides G), and their differences: whole numbers
    **{("topics/kv_cache/mla_vs_gqa_under_tp.py", fn, expr): WHOLE
       for fn, expr in (("_reversals", "g_now > m_now"), ("_reversals", "lead > lead_now"), ("verdict", "g == m"),
                        ("verdict", "g > m"), ("verdict", "m > g"), ("verdict", "lead > lead_now"))},
    ("topics/moe/ep_load_skew.py", "_placement_judgements", "2 * hot_tokens <= crossover"): TEXT,
    ("topics/cost/cost_audit_rollout.py", "_by", "use < 1.15"): TEXT,
    ("topics/moe/ep_load_skew.py", "solve", "sim.naive > s.value(T_bal) * (1 + 1e-12)"): SAMPLED,
    ("topics/prefixcache/prefix_cache_engines.py", "_after_eviction", "exact != s.value(after_radix)"): SLIP,
    ("topics/runner/model_runner_v2.py", "crossings", "per_seq + ar_1 != cpu_1"): TEXT,
    ("topics/runner/model_runner_v2.py", "crossings", "1 <= batch <= cap"): TEXT,
    ("topics/runner/model_runner_v2.py", "crossings", "reads_0 + reads_1 * batch >= math_1 * batch"): TEXT,
    ("topics/runner/model_runner_v2.py", "crossings", "(reads_0 + reads_1 * batch >= math_1 * batch) == longer"):
        TEXT,
    ("topics/runner/model_runner_v2.py", "crossings", "gpu_at_1 < cpu_0 + cpu_1"): TEXT,
    ("topics/speculation/spec_decode_exactness.py", "solve", "g < s.value(bound)"): _margin("2%"),
    ("topics/speculation/spec_decode_by_load.py", "_best_length", "x >= line"):
        _margin("0.1% (RULE_EDGE) where it keys an answer or an option; elsewhere it fills the worked table"),
    ("topics/speculation/spec_decode_by_load.py", "_best_length", "chosen == 0"): TEXT,
    ("topics/speculation/spec_decode_by_load.py", "_best_length", "chosen == top_g"): TEXT,
    ("topics/speculation/spec_decode_by_load.py", "_best_length", "g != chosen"): NAMES,
    ("topics/speculation/spec_decode_by_load.py", "_peak_reasons", "chosen == 0"):
        _margin("0.1% (RULE_EDGE): the draft length is _best_length's, graded, so refused near the rule's line"),
    ("topics/cost/slo_capacity_unit.py", "_capacity_judgements", "abs(s.evaluate(alone / by_count) - 1) < CAP_MARGIN"):
        UNLISTED,
    ("topics/cost/slo_capacity_unit.py", "_capacity_judgements",
     "abs(v(ratio) / s.evaluate(threshold) - 1) < CAP_MARGIN"): UNLISTED,
    ("topics/cost/slo_capacity_unit.py", "against", "abs(v(ratio) / s.evaluate(threshold) - 1) < CAP_MARGIN"):
        UNLISTED,  # the same line, seen from its closure
    ("topics/kv_cache/mla_tp_duplication.py", "_attention_judgements", "abs(s.value(extra) / some - 1) < NEAR_TIE"):
        _margin("3% (NEAR_TIE) where the trade-offs are asked; the option's truth is decided by s.compare"),
    **{("topics/moe/moe_1t_training_layout.py", fn, comparison): WHOLE for fn, comparison in (
        ("_training_a2a", "PP2_n < pp_in"), ("_training_a2a", "PP2_n >= pp_in"), ("_training_a2a", "ep_n * pp <= G_n"),
        ("_training_a2a", "pp_in != PP_n"), ("_training_a2a", "pp_in == PP_n"), ("_training_a2a", "pp_wide < pp_in"),
        ("_training_a2a", "pp_wide == PP2_n"), ("deepest_fit", "ep_n * pp <= G_n"),
        ("deepest_fit", "pp <= layers // 2"), ("powers", "low * 2 ** i <= high"))},  # pipeline depths, GPU counts
    ("topics/training/restart_goodput.py", "_too_close",
     "abs((today - float(loss)) / (float(LEVER_SHARE) * today) - 1) < LEVER_TOO_CLOSE"): UNLISTED,
    ("topics/longcontext/million_token_context.py", "_breaks", "s.value(nodes) == 1"): TEXT,
    ("topics/longcontext/million_token_context.py", "_regime", "nodes == 1"): TEXT,
    ("topics/moe/moe_1t_training_layout.py", "_layout_regime", "stages > 1"): TEXT,
    ("topics/moe/moe_1t_training_layout.py", "_layout_regime", "stages_2 == stages"): TEXT,
    ("topics/moe/moe_1t_training_layout.py", "solve", "abs(q - round(q)) < float(CEIL_CLEAR) * q"):
        "the refusal itself: a draw whose state needs a whole number of GPUs to within 0.05% is not asked the "
        "ceiling; floats place only that margin's edge, and the ceiling asked is exact",
    **{("topics/kernels/split_kv_decode_merge.py", where, "(max(w_t + t0, m_t) + fixed) / (max(w_t + t1, m_t) + "
        "fixed) > line"): _SM_PROBE for where in ("solve", "pays")},
    ("topics/speculation/spec_decode_by_load.py", "_peak_reasons", "at_half > 1"):
        _margin("3% (SPEEDUP_TIE): draws nearer a speedup of 1 at half the peak batch are refused"),
    ("topics/speculation/spec_decode_step_accounting.py", "_break_even",
     "(plain_is, verify_is) == (plain_compute, verify_compute)"): REGION,
    ("topics/speculation/spec_decode_step_accounting.py", "_break_even", "root * (g + 1) * t_F > t_W + root * t_KV"):
        REGION,
    ("topics/speculation/spec_decode_step_accounting.py", "_break_even", "root * t_F > t_W + root * t_KV"): REGION,
    ("topics/network/incast_buffer.py", "_incast_regime", "s.value(k) == 1"): TEXT,
    ("topics/training/training_compute_budget.py", "_schedule_levers", "saved > 0"): TEXT,
    ("topics/serving/roofline_model_breaks.py", "_judge_breaks",
     "abs(s.evaluate(cost / step) / s.evaluate(matters) - 1) < TOO_CLOSE"): UNLISTED,
    ("topics/serving/roofline_model_breaks.py", "solve", "name != dominant"): NAMES,
    ("topics/kv_cache/preemption_policies.py", "_near", "abs(ratio - 1) <= TOO_CLOSE"):
        _margin("3% (TOO_CLOSE) where the options it weighs are asked (refuse_if_asked); the options themselves are "
                "decided by s.compare"),
    ("topics/serving/continuous_batching_padding.py", "_choose_lever", "abs(ratio - 1) < LEVER_TIE"):
        _margin("1% (LEVER_TIE) where the lever is asked (refuse_if_asked); the lever chosen is decided by s.compare"),
    ("topics/serving/decode_loop_overlap.py", "_judge_payers", "abs(s.evaluate(cut / tpot_line) - 1) < TPOT_TIE"):
        _margin("5% (TPOT_TIE) where the payers are asked (refuse_if_asked); the TPOT option is decided by s.compare"),
    **{("topics/serving/decode_loop_overlap.py", where, "abs(gain / target - 1) < LEVER_TIE"):
       _margin("2% (LEVER_TIE) where the levers are asked (refuse_if_asked); each lever's truth is decided by "
               "s.compare") for where in ("judge", "_judge_levers")},
    ("topics/kv_cache/sliding_window_savings.py", "_hairline", "abs(value / line - 1) <= HAIR"):
        _margin("3% (HAIR) where the levers are asked (refuse_if_asked); each lever's truth is decided by s.compare"),
    ("topics/moe/ep_load_skew.py", "solve", "abs(s.evaluate(L_rep / L_hot) - 1) < TIE"):
        _margin("3% (TIE) where the placement and the replicated layer are asked (refuse_if_asked); the placement "
                "options are decided by s.compare"),
    ("topics/scaleup/b200_h100_roles.py", "_buy", "abs(x - round(x)) < NEAR_WHOLE"):
        "a refusal probe: a pool whose load lies within 0.05 (NEAR_WHOLE) of a whole replica is refused where the "
        "node counts are asked (refuse_if_asked); the counts themselves are exact ceilings on the sheet",
    ("topics/scaleup/b200_h100_roles.py", "_roles_judged", "abs(a2a / other - 1) < LINE_TIE"):
        _margin("3% (LINE_TIE) where 'why' is asked (refuse_if_asked); 'waits on its all-to-all' is decided by "
                "s.compare"),
    # GPU counts against the rack's: 2 or 3/2 × an EP of 32, 48, 64 or 144; 2 or 1/2 × 8 to 32 prefill GPUs plus the EP
    # kv-cache-tiers (reader 7): a design option whose two figures sit within the graded tolerance is not listed.
    **{("topics/tiers/kv_cache_tiers.py", where, expr): UNLISTED.replace("the answers' 3%", "the graded 5% (savings) "
                                                                           "or 3% (a fetch against a recompute)")
       for where, expr in (("_design", "abs(x - y) < 0.03 * max(x, y)"), ("quicker", "abs(x - y) < 0.03 * max(x, y)"),
                           ("_design", "abs(x - y) < NEAR_TIE * max(abs(x), abs(y))"),
                           ("larger", "abs(x - y) < NEAR_TIE * max(abs(x), abs(y))"),
                           # the second-hit rule's drawn share (1 in 25 to 1 in 200) within admit_share's 3%
                           ("_admission", "abs(s.evaluate(admit) - share) < 0.03 * max(s.evaluate(admit), share)"))},
    **{("topics/scaleup/nvl72_boundary.py", where, expr): WHOLE for where, expr in (
        ("_crosses", "size > domain"), ("_crosses", "pool > domain"), ("_fits", "gpus <= domain"))},
}


def _floats(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            f = sub.func
            if isinstance(f, ast.Attribute) and f.attr in FLOAT_METHODS or \
                    isinstance(f, ast.Name) and f.id in FLOAT_BUILTINS:
                return True
    return False


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _exact(node: ast.Compare) -> bool:
    """s.compare(a, b) < 0: decided on exact values already."""
    return any(isinstance(o, ast.Call) and isinstance(o.func, ast.Attribute) and o.func.attr == "compare"
               for o in (node.left, *node.comparators))


def _refusal(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Inside `raise`, or the test of an `if` that only raises: it refuses a draw, it decides no answer."""
    while node in parents:
        parent = parents[node]
        if isinstance(parent, ast.Raise) or isinstance(parent, ast.If) and node is parent.test \
                and all(isinstance(b, ast.Raise) for b in parent.body):
            return True
        if isinstance(parent, (ast.FunctionDef, ast.Lambda)):
            return False
        node = parent
    return False


def _parameters(function: ast.FunctionDef) -> list[str]:
    args = function.args
    return [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]


def float_comparisons(source: str) -> set[tuple[str, str]]:
    """(function, comparison) for every comparison on floats in `source` that is not a refusal. A float
    handed to a function of the same module as an argument is a float inside it too (a helper that judges
    levers on s.value() results it was passed)."""
    tree = ast.parse(source)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    by_name = {f.name: f for f in functions}
    floats: dict[str, set[str]] = {f.name: set() for f in functions}

    def is_float(node: ast.AST, scope: set[str]) -> bool:
        return _floats(node) or bool(_names(node) & scope)

    for _ in range(4):  # floats handed on through a few assignments and calls
        for function in functions:
            scope = floats[function.name]
            for node in ast.walk(function):
                if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and node.value is not None \
                        and is_float(node.value, scope):
                    for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                        scope |= _names(target)
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in by_name:
                    callee = by_name[node.func.id]
                    names = _parameters(callee)
                    handed = {names[i] for i, arg in enumerate(node.args) if i < len(names) and is_float(arg, scope)}
                    handed |= {k.arg for k in node.keywords if k.arg and is_float(k.value, scope)}
                    floats[callee.name] |= handed
    found = set()
    for function in functions:
        scope = floats[function.name]
        for node in ast.walk(function):
            if isinstance(node, ast.Compare) and any(isinstance(op, ORDERINGS) for op in node.ops) \
                    and is_float(node, scope) and not _exact(node) and not _refusal(node, parents):
                found.add((function.name, ast.unparse(node)))
    return found


def _bank_float_comparisons() -> set[tuple[str, str, str]]:
    files = sorted([*(SOLVERS / "topics").rglob("*.py"), *(SOLVERS / "formulas").rglob("*.py")])
    return {(path.relative_to(SOLVERS).as_posix(), function, comparison)
            for path in files for function, comparison in float_comparisons(path.read_text())}


def test_no_float_comparison_decides_an_answer():
    found = _bank_float_comparisons()
    new = sorted(found - set(ALLOWED))
    assert not new, "decide these with s.compare / regime_by (or list them in ALLOWED with why they decide " \
                    "nothing):\n" + "\n".join(f"solvers/{path}: {fn}: {comparison}" for path, fn, comparison in new)
    assert not sorted(set(ALLOWED) - found), "ALLOWED names comparisons the solvers no longer make: drop them"


@pytest.mark.parametrize(("source", "flagged"), [
    # The key check's bug: sums of floats compared.
    ("def f(p, s):\n    a = sum(p.x)\n    b = sum(p.y)\n    s.judge('k', 'o', b < a, '')\n", True),
    ("def f(s, x, y):\n    s.judge('k', 'o', s.value(x) > s.value(y), '')\n", True),
    ("def f(s, x):\n    share = s.evaluate(x)\n    held = share\n    s.choose('k', 'a' if held >= 0.5 else 'b')\n",
     True),
    ("def f(s, x, y):\n    s.judge('k', 'o', s.compare(x, y) > 0, '')\n", False),
    ("def f(s, x):\n    if s.value(x) < 1:\n        raise Reject('none')\n", False),
    ("def f(p, s):\n    s.judge('k', 'o', p.batch > 32, '')\n", False),
    # A float handed to a helper, positionally or by keyword, is a float inside it.
    ("def g(s, t):\n    s.judge('k', 'o', t > 1, '')\n\ndef f(s, x):\n    g(s, s.value(x))\n", True),
    ("def g(s, *, t):\n    s.judge('k', 'o', t > 1, '')\n\ndef f(s, x):\n    g(s, t=s.evaluate(x))\n", True),
    ("def g(s, t):\n    s.judge('k', 'o', t > 1, '')\n\ndef f(s, p):\n    g(s, p.batch)\n", False),
])
def test_the_scan_finds_a_decision_on_floats(source, flagged):
    assert bool(float_comparisons(source)) == flagged


def _sheet_number(node: ast.AST) -> bool:
    """s.value(x) or s.evaluate(x): a sheet value read as a float."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("value", "evaluate") and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "s")


def float_decisions(source: str) -> list[int]:
    """The lines that compare two sheet values as floats, whatever the comparison then decides (a redraw too)."""
    return [node.lineno for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Compare) and _sheet_number(node.left)
            and any(_sheet_number(right) for right in node.comparators)]


def test_the_check_finds_two_sheet_values_compared_as_floats():
    assert float_decisions("if s.value(a) <= s.value(b):\n    pass\n") == [1]
    assert float_decisions("if s.compare(a, b) <= 0 and s.value(a) > 3:\n    pass\n") == []


def test_no_solver_compares_two_sheet_values_as_floats():
    """Beyond the answers the scan above follows: a redraw or a branch between two sheet values is s.compare too."""
    solvers = Path(__file__).parents[1] / "solvers"
    found = [f"{path.relative_to(solvers.parent)}:{line}" for path in sorted(solvers.rglob("*.py"))
             for line in float_decisions(path.read_text())]
    assert not found, f"use s.compare(a, b) for these: {found}"
