"""One capacity unit at the SLO across two GPU generations."""
from __future__ import annotations

from dataclasses import replace

from solvers.derivation import Reject, Sheet, Side
from solvers.formulas.collective import all_reduce_terms
from solvers.formulas.common import (
    hbm_bandwidth,
    require_context,
)
from solvers.formulas.steptime import (
    DEFAULT_CONSTANTS,
    decode_at_speed,
    engine,
    mean_decode_context,
    on_gpu,
)
from solvers.sheetmath import ceil_of, max_of
from solvers.units import format_number

BUY_MARGIN = 0.10  # the step model's own error against measured systems is 1.1-1.4x (REALITY.md): a purchase
# decided by less than a tenth is inside it, so such draws are refused rather than keyed
CAP_MARGIN = 0.03  # the batch is graded at 3%: a cap within that of the binding one is a coin flip, refused
MAX_SEQS = 1024  # vLLM's max_num_seqs default on large-memory GPUs: no engine decodes more sequences a replica

_CAPS = {"batch_by_pool": "the KV pool", "batch_by_bandwidth": "bandwidth at the TPOT target",
         "batch_by_compute": "compute at the TPOT target"}


def _binding(s: Sheet, tag: str) -> str:
    """Which of the three caps sets this GPU's batch; a rival within CAP_MARGIN of it is refused (the answer
    would be a coin flip: @12012's 4,102 against 4,101)."""
    caps = {name: s.number(f"{name}_{tag}") for name in _CAPS}
    least, runner = sorted(caps.values())[:2]
    if runner < least * (1 + CAP_MARGIN):
        raise Reject("two caps on a replica's batch agree within the batch's tolerance: which binds is a coin flip")
    return _CAPS[min(caps, key=caps.__getitem__)]


def _binding_why(s: Sheet, tag: str) -> str:
    """The three caps side by side, as the interviewer says why one binds."""
    caps = (f"{_CAPS[name].removesuffix(' at the TPOT target')} {format_number(s.number(f'{name}_{tag}'), 4)}"
            for name in _CAPS)
    return "batches by " + ", ".join(caps) + " requests: the least binds"


def _capacity_assumptions(s: Sheet) -> None:
    s.assume("The pools decode only (prefill runs elsewhere): a replica's unit is the requests per second its "
             "decode batch finishes at the TPOT target, every request at the mean context. Both pools use the same "
             "TP, as a fleet that swaps GPUs under one deployment recipe does; an operator sizing a B200 pool afresh "
             "would try a narrower TP (180 GB parts hold a 70B in bf16 at TP 2), which changes the unit per replica "
             "but not the comparison per GPU-dollar this purchase makes. The card's step model (attention by "
             "attention-flops); each GPU's all-reduces run over its own NVLink.")
    s.assume(f"A replica batches at most {MAX_SEQS} sequences (vLLM's max_num_seqs on large-memory GPUs): draws "
             "whose caps allow more are refused, as are draws where two caps agree within the batch's tolerance.")
    s.assume("The router splits by replica count. A least-outstanding-requests or KV-usage-aware router balances "
             "on load rather than count and comes near routing by units without weights, but only once the old "
             "replicas' latency rises: it learns the split by running them near their SLO.")
    s.assume("GPU-hour prices are on-demand rental assumptions (mid-2026: A100 $0.8-3, H100 $2-5, H200 $2.5-7, "
             "B200 $4.5-6), as the references list; the buying verdict turns on their ratio, and draws within a "
             "tenth of it (inside the step model's own error against measured systems) are refused.")


def _capacity_judgements(s: Sheet, ratio, e_old, e_new, by_count, n_new, U_new, C) -> None:
    v = s.value
    units = format_number(v(ratio), 3)

    def judge(option: str, holds: bool, why: str) -> None:
        s.judge("facts", option, holds, why)

    def against(option: str, threshold, name: str) -> None:
        """The unit ratio against a datasheet ratio: within the ratio's own 3% the option is not listed (read12
        @42: '1.43 against 1.43', false on a difference the printed figures cannot show)."""
        level = format_number(s.evaluate(threshold), 3)
        if abs(v(ratio) / s.evaluate(threshold) - 1) < CAP_MARGIN:
            s.judge("facts", option, None, f"{units} against a {name} of {level}: too close to call")
        else:
            judge(option, s.compare(ratio, threshold) > 0, f"{units} against {level}")

    against("a new replica is worth more old ones than the bandwidth ratio", e_new.BW / e_old.BW, "bandwidth ratio")
    against("a new replica is worth more old ones than the compute ratio", e_new.P / e_old.P, "compute ratio")
    judge("routing by replica count reaches {count_reach} of the fleet's capacity in units",
          s.compare(by_count, s.param("f_reach", "count_reach") * C) >= 0,
          f"{s.text(by_count)} against {s.text(C)}")
    # read12: the two options this replaces restated keys (the old pool's share is 1 − the new pool's, graded in the
    # same stage; 'over half the new pool idle' is the unit ratio past 2). Retiring the old pool is a new question.
    alone = s.step("new_pool_capacity", "Capacity of the new pool alone", "C_new", n_new * U_new, "requests/s",
                   "what is left if the old pool is retired: its replicas times its unit")
    if abs(s.evaluate(alone / by_count) - 1) < CAP_MARGIN:
        s.judge("facts", "the new pool alone could carry the traffic at which routing by count breaks",
                None, "too close to call")
    else:
        judge("the new pool alone could carry the traffic at which routing by count breaks",
              s.compare(alone, by_count) >= 0, f"{s.text(alone)} against {s.text(by_count)}")
    if len({x for x in s.judged("facts").values() if x is not None}) < 2:
        raise Reject("every fact holds, or none does: nothing to tell apart")


def _capacity_regime(s: Sheet, old, new, cost_old, cost_new, ratio, price_ratio, C, by_count) -> None:
    a_new = "An" if new.name[0] in "AEFHILMNORSX" else "A"  # "an H200", said as letters
    units, prices = format_number(s.value(ratio), 3), format_number(s.value(price_ratio), 3)
    dollars = (f"{s.text(cost_new)} against {s.text(cost_old)} per "
               "million output tokens at the SLO")
    routing = (f"Routed by replica count the fleet takes {s.text(by_count)} before "
               f"the {old.name} pool breaks its TPOT; routed by units, {s.text(C)}.")
    s.regime_by(ratio, price_ratio, tie="below", above=Side(
        "buy-new",
        f"{a_new} {new.name} replica is worth {units} {old.name} replicas at the SLO and costs {prices}× as much: "
        f"{dollars}. Buy the next capacity unit on the new GPU. " + routing,
        f"If the new GPU cost more than {units}× the old per hour, the old GPU would be the cheaper unit; a new "
        "SLO or context length moves what caps each batch, and with it the unit ratio itself.",
        near=f"{a_new} {new.name} replica is worth {units} {old.name} replicas and costs {prices}× as much: {dollars}, "
             "close enough that a price change or a new SLO flips the purchase. " + routing),
        below=Side(
        "buy-old",
        f"{a_new} {new.name} replica is worth only {units} {old.name} replicas at the SLO but costs {prices}× as much: "
        f"{dollars}. The older GPU is the cheaper capacity unit. " + routing,
        f"Once the new GPU costs less than {units}× the old per hour, it becomes the cheaper unit; a new SLO or "
        "context length moves what caps each batch, and with it the unit ratio itself.",
        near=f"{a_new} {new.name} replica is worth {units} {old.name} replicas and costs {prices}× as much: {dollars}, "
             "close enough that a price change or a new SLO flips the purchase. " + routing))


def solve(p, s: Sheet) -> None:
    old, new = p.old_gpu, p.new_gpu
    if old.id == new.id or hbm_bandwidth(new) <= hbm_bandwidth(old):
        raise Reject("not a newer generation: the second GPU must stream faster")
    require_context(p.model, p.prompt + p.reply)
    e_old = engine(s, p.model, old, p.tp, DEFAULT_CONSTANTS, communication=p.tp > 1, kv_prerequisite=True)
    e_new = on_gpu(s, e_old, new, "new")
    P_in = s.param("P_in", "prompt")
    L_out = s.param("L_out", "reply")
    tpot = s.param("TPOT", "tpot")
    n_old, n_new = s.param("n_old", "old_replicas"), s.param("n_new", "new_replicas")
    c_old, c_new = s.param("c_old", "old_price"), s.param("c_new", "new_price")
    S = mean_decode_context(s, P_in, L_out)

    units, batches = {}, {}
    for tag, gpu, e in (("old", old, e_old), ("new", new, e_new)):
        ar = all_reduce_terms(s, p.model, gpu, p.tp, group=tag)
        decode = decode_at_speed(s, e, gpu, ar, S, tpot, "the TPOT target", tag)
        batches[tag] = decode.batch
        if s.value(decode.batch) > MAX_SEQS:
            raise Reject(f"a batch past {MAX_SEQS} sequences a replica: no engine schedules that many")
        units[tag] = s.step(f"unit_{tag}", f"Capacity unit: requests/s one {gpu.name} replica serves at the SLO",
                            f"U_{tag}", decode.batch / (decode.step * L_out), "requests/s",
                            "its batch, one token each a step, over the reply length")
        s.choose(f"binds_{tag}", _binding(s, tag), _binding_why(s, tag))
    U_old, U_new = units["old"], units["new"]
    ratio = s.step("unit_ratio", f"Capacity ratio, {new.name} over {old.name} replica", "ρ_U", U_new / U_old, "x",
                   "what one new replica is worth in old ones at the SLO")
    datasheet = max_of(s.step("compute_ratio", "Datasheet compute ratio", "ρ_P", e_new.P / e_old.P, "x",
                              "dense bf16 peaks"),
                       s.step("bandwidth_ratio", "Datasheet bandwidth ratio", "ρ_BW", e_new.BW / e_old.BW, "x",
                              "HBM bandwidths"))

    C = s.step("fleet_capacity", "Fleet capacity in units", "C", n_old * U_old + n_new * U_new, "requests/s",
               "each pool's replicas times its unit")
    share = s.step("new_share", f"Share of traffic to route to the {new.name} pool", "f_new", n_new * U_new / C, "%",
           "in proportion to capacity units, so both pools sit at the same share of their SLO capacity")
    by_count = s.step("count_routing_limit", "Rate at which routing by replica count breaks the SLO", "λ_count",
                      (n_old + n_new) * U_old, "requests/s",
                      f"an even split gives every replica λ/(n_old + n_new): the {old.name} pool saturates first")

    mtok = s.given("M_tok", 1e6, "tokens", "tokens in a million")
    cost_old = s.step("unit_cost_old", f"Dollars per million output tokens at the SLO, {old.name}", "D_old",
                      e_old.TP * c_old / (U_old * L_out) * mtok, "$", "a replica's price over its SLO output")
    cost_new = s.step("unit_cost_new", f"Dollars per million output tokens at the SLO, {new.name}", "D_new",
                      e_new.TP * c_new / (U_new * L_out) * mtok, "$", "the same for the new replica")
    s.step("replacement", f"{new.name} replicas that carry the {old.name} pool's load", "n_repl",
           ceil_of(n_old * U_old / U_new), "", "the old pool's capacity in new units, in whole replicas")
    price_ratio = s.step("price_ratio", "Price ratio per GPU-hour, new over old", "ρ_c", c_new / c_old, "x",
                         "what a new GPU-hour costs in old ones")
    s.step("breakeven_price", f"{new.name} price per GPU-hour at which the purchase flips", "c_even",
           ratio * c_old, "$/h", "where the price ratio meets the unit ratio: both GPUs cost the same per unit")
    if abs(s.value(ratio) / s.value(price_ratio) - 1) < BUY_MARGIN:
        raise Reject("the unit ratio and the price ratio agree within the unit ratio's tolerance: no verdict")
    _capacity_assumptions(s)
    s.slip("units taken as the datasheet bandwidth ratio", s.evaluate(e_new.BW / e_old.BW) / s.value(ratio),
           on="unit_ratio")
    s.slip("share split by replica count", s.evaluate(n_new / (n_old + n_new)) / s.value(share), on="new_share")
    _capacity_judgements(s, ratio, e_old, e_new, by_count, n_new, U_new, C)
    _capacity_regime(s, old, new, cost_old, cost_new, ratio, price_ratio, C, by_count)
    if s.compare(ratio, 2 * datasheet) > 0:  # the expert reading's @47: a TPOT the old pool can barely meet
        regime = s.regime
        assert regime is not None
        cause = ("its weights leave little HBM for KV" if s.results["binds_old"] == _CAPS["batch_by_pool"] else
                 "at this TPOT its weight read takes most of each step")
        s.regime = replace(regime, summary=regime.summary + (
            f" An {old.name} replica barely serves here (a batch of {s.text(batches['old'])}): {cause}, so a newer "
            "replica is worth over twice the datasheet ratio, a reason to move this model off the old pool rather "
            "than route to it."))

