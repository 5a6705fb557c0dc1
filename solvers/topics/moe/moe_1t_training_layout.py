"""Training a large MoE - total or active, the layout, and what a dense plan misses."""
from __future__ import annotations

from dataclasses import replace

import sympy

from solvers.conventions import scale_up_domain
from solvers.data import Record
from solvers.derivation import Reject, Sheet, Side, exact
from solvers.formulas.common import (
    given_active_params,
    given_config,
    given_hbm_bytes,
    given_model_params,
    given_nic,
    given_nvlink,
    given_peak_flops,
)
from solvers.formulas.moe import COMBINE_BYTES, moe_layers, parameter_count
from solvers.formulas.training import FLOPS_PER_PARAM_TOKEN
from solvers.sheetmath import ceil_of
from solvers.units import figures_against, format_number, format_quantity

STATE_BYTES = 16  # mixed-precision Adam: bf16 weights and grads (2 + 2), fp32 master and two moments (12)


SHARDED_BYTES = 12  # the fp32 part, sharded over every GPU by ZeRO-1


A2A_PASSES = 4  # forward dispatch and combine, and both again in the backward pass


SHARE_CLEAR = sympy.Rational(21, 20)  # the all-to-all's share of the serial step kept 5% clear of its line
# A NIC all-to-all and a compute time closer than this are refused as a tie: the figures are floors at datasheet
# rates beside an MFU drawn to the percent, so a margin under 10% is within the model's own uncertainty (read3-R2).
TIE = sympy.Rational(11, 10)
# The depth the DP sync sets is a count of doublings: refused within 2% of a doubling's line, where the shown
# figures could tip it (the push's hint gives the (DP − 1)/DP factor, so a candidate need not round it). Wider,
# as TIE is, it would refuse the declared push past the bar's 10% on its own.
SYNC_TIE = sympy.Rational(51, 50)
DP_PASSES = 2  # ZeRO-1 over DP: reduce-scatter the bf16 grads, all-gather the updated bf16 params
CEIL_CLEAR = sympy.Rational(1, 2000)  # a ceiling whose quotient lies within 0.05% of a whole number (the shown
# figures round to 4 places) is refused: @9713 once keyed 123 where the shown figures gave 121.98
OPTION_CLEAR = sympy.Rational(21, 20)  # an option whose figure lies within 5% of its cut is not listed
SHORT_RUN = 14 * 86400  # seconds: under two weeks of compute, the run is shorter than real pretraining runs
FP8_DISPATCH = sympy.Rational(3, 4)  # dispatch in one byte both ways (DeepSeek-V3), the combine kept in bf16


def _ep_in_domain(model: Record, domain: int, gpus: int) -> int:
    """The widest EP group inside one NVLink domain: a power of two that divides the experts and the job."""
    ep = 1
    while ep * 2 <= domain and model.experts % (ep * 2) == 0 and gpus % (ep * 2) == 0:
        ep *= 2
    return ep


def _training_a2a(s: Sheet, p, model: Record, G, N_a, P, mfu, E_p, ep: int) -> None:
    """All-to-all against compute per step, EP inside NVLink and spread over two domains, and the router's
    hottest expert against its GPU's share."""
    h = given_config(s, model, "hidden")
    k = given_config(s, model, "experts_per_token")
    L = s.given("L_moe", moe_layers(model), "", "MoE layers")
    B = s.param("B", "batch")
    b_a = s.given("b_a", COMBINE_BYTES, "B", "bytes per activation (bf16)")
    n_pass = s.given("n_pass", A2A_PASSES, "", "all-to-all passes per MoE layer (dispatch, combine, forward, backward)")
    V = s.step("a2a_bytes", "All-to-all bytes per token", "V_tok", L * n_pass * k * h * b_a, "MB",
               "k copies of the hidden vector, four passes, every MoE layer")
    T_g = s.step("tokens_per_gpu", "Tokens per GPU per step", "T_g", B / G, "tokens",
                 "every GPU of a stage's EP group takes 1/G of the batch through the stage's MoE layers")
    t_c = s.step("compute_step", "Compute per step", "t_comp", FLOPS_PER_PARAM_TOKEN * N_a * B / (G * P * mfu), "s",
                 "6·N_act FLOPs per token, shared by every GPU at the MFU")
    B_nvl = given_nvlink(s, p.gpu)
    B_nic = given_nic(s, p.nic)
    a_in = s.step("a2a_nvlink", "All-to-all per step, EP inside NVLink", "t_NVL", T_g * V * (E_p - 1) / E_p / B_nvl,
                  "s", "copies for the other EP − 1 GPUs of the domain, over NVLink")
    a_out = s.step("a2a_nic", "All-to-all per step, the same EP group over two domains", "t_NIC",
                   T_g * V / 2 / B_nic, "s",
                   "half the copies now sit in the other domain and cross the NIC, which binds: NVLink carries the "
                   "rest far faster")
    s.step("nvlink_share", "Share of the step in the all-to-all, EP inside NVLink", "f_NVL", a_in / (t_c + a_in),
           "%", "all-to-all on top of the compute")
    s.step("nic_share", "Share of the step in the all-to-all, EP over two domains", "f_NIC", a_out / (t_c + a_out),
           "%", "the same, over the NIC")
    m = s.param("m", "hot")
    n_g = s.step("experts_per_gpu", "Routed experts per GPU in each MoE layer", "n_g", model.experts / E_p, "experts",
                 "E over the EP group")
    E = given_config(s, model, "experts")
    s.step("hot_stretch", "MoE layer stretched by the hottest expert", "S_hot",
           (m + (n_g - 1) * (E - m) / (E - 1)) / n_g, "x",
           "training GEMMs are compute-bound, so a GPU's time follows its tokens: the hot expert at m times "
           "the mean, its other experts at an even share of the rest")
    # Within 10% of each other the verdict would turn on the figures' tolerance and the model's: refused as a tie.
    if s.compare(a_out, TIE * t_c) < 0 and s.compare(t_c, TIE * a_out) < 0:
        raise Reject("the NIC all-to-all lies within 10% of the compute: a tie, no layout to argue for")
    # The option names the serial step (compute plus all-to-all); within 5% of its line the verdict would turn on
    # the figures' tolerance or on a reader who takes the compute alone as the step: refused.
    line, f_nvl = exact(p.a2a_share), s.symbol("f_NVL")
    if s.compare(f_nvl, line * SHARE_CLEAR) < 0 and s.compare(f_nvl, line / SHARE_CLEAR) > 0:
        raise Reject("the all-to-all's share of the serial step lies within 5% of its line")
    crosses = s.compare(a_out, t_c) < 0
    B_nic_sym = s.symbol("BW_NIC")
    b_g = s.given("b_g", 2, "B", "bf16 gradient and parameter bytes for the DP sync")
    n_dp = s.given("n_dp", DP_PASSES, "", "DP passes a step (ZeRO-1: reduce-scatter grads, all-gather params)")
    G_n, E_n = int(s.value(G)), int(s.value(E_p))
    layers = model.layers

    def sync(pp, ep_n: int):
        """Each GPU's slice of bf16 grads reduce-scattered and its params all-gathered across the DP replicas
        (G/(EP·PP) of them, in other domains): (DP − 1)/DP of its bytes a pass, over its NIC."""
        return n_dp * b_g * (s.symbol("N_x") / ep_n + s.symbol("N_s")) / pp * (1 - ep_n * pp / G) / B_nic_sym

    def deepest_fit(floor: int, ep_n: int, extra) -> int | None:
        """The fewest stages, a power of two at least `floor`, at which the NIC's traffic a step (the DP sync,
        and `extra` beside it) fits under the compute; None where no depth the layers and GPUs allow does."""
        pp = floor
        while pp <= layers // 2 and ep_n * pp <= G_n:
            if s.compare(extra + sync(pp, ep_n), t_c) <= 0:
                return pp
            pp *= 2
        return None

    def tied(depths, ep_n: int, extra) -> bool:
        """The NIC's traffic within 2% of the compute at a depth whose verdict moves the plan: the depth would
        turn on the figures' tolerance."""
        return any(s.compare(SYNC_TIE * (extra + sync(d, ep_n)), t_c) > 0
                   and s.compare(extra + sync(d, ep_n), SYNC_TIE * t_c) < 0 for d in depths)

    def powers(low: int, high: int) -> list[int]:
        return [low * 2**i for i in range(64) if low * 2**i <= high]

    PP_n, PP2_n = int(s.value(s.symbol("PP"))), int(s.value(s.symbol("PP_2")))
    t_dp = s.step("dp_sync", "DP gradient sync per step over the NIC, EP inside NVLink, at the state's depth", "t_DP",
                  sync(s.symbol("PP"), E_n), "s",
                  "each GPU's slice of bf16 grads reduce-scattered and its params all-gathered across the "
                  "G/(EP·PP) DP replicas, which sit in other domains: over its NIC, (DP − 1)/DP of the bytes each pass")
    pp_in = deepest_fit(PP_n, E_n, 0)
    exposed = pp_in is None
    if pp_in is None:  # no depth hides it: the deepest the layers and GPUs allow, the sync left partly exposed
        pp_in = max(powers(PP_n, min(layers // 2, G_n // E_n)) or [PP_n])
    if pp_in != PP_n:
        s.given("j_s", (pp_in // PP_n).bit_length() - 1, "", "doublings past PP until the DP sync fits under the "
                "compute, or the layers allow no more")
        s.step("pipeline_stages_sync", "Pipeline stages the DP sync needs, EP inside NVLink", "PP_s",
               s.symbol("PP") * 2**s.symbol("j_s"), "",
               "the sync outruns the compute at the state's depth; each doubling halves a GPU's slice of it")
        s.step("dp_sync_s", "DP gradient sync per step at that depth", "t_DP_s",
               sync(s.symbol("PP_s"), E_n), "s", "past the compute still: no depth the layers allow hides it"
               if exposed else "now under the compute, so an overlapped sync hides")
    pp_wide = deepest_fit(PP2_n, 2 * E_n, a_out) if crosses else None
    run_wide = pp_wide is not None and pp_wide < pp_in
    # The plan moves if the in-domain depth does, or if EP over two domains fits at a depth below it: ties there.
    if tied(powers(PP_n, pp_in), E_n, 0) or (crosses and tied(powers(PP2_n, pp_in // 2), 2 * E_n, a_out)):
        s.refuse_if_asked(("pipeline_plan",), "the NIC's traffic lies within 2% of the compute at a depth the plan "
                          "weighs")
    if crosses and PP2_n < pp_in:
        s.step("dp_sync_2", "DP gradient sync per step over the NIC, EP over two domains", "t_DP_2",
               sync(pp_wide or PP2_n, 2 * E_n), "s",
               f"at {format_number(pp_wide or PP2_n)} stages, EP {format_number(2 * E_n)}: the same sync, "
               "the experts split twice as many ways")
        s.step("nic_total_2", "NIC time per step, EP over two domains: all-to-all and DP sync", "t_NIC2",
               a_out + s.symbol("t_DP_2"), "s", "the NIC carries both once EP crosses it")
    s.assume("The DP gradient sync (ZeRO-1: bf16 grads reduce-scattered, bf16 params all-gathered across the DP "
             f"replicas in other domains, over the NIC: {s.text(t_dp)} a step at the state's depth here) overlaps "
             "the compute, the reduce-scatter bucket by bucket under the backward pass, the all-gather under the "
             "next forward, so it is not in the serial step while the NIC's traffic fits under the compute. Where "
             "it does not, the layout goes deeper (a GPU syncs 1/PP of its EP slice): the depth the state sets is a "
             "floor, and the layout to run is the fewest stages at which the state fits and the NIC's traffic "
             "hides.")
    inside = (f"EP {format_number(ep)} kept inside NVLink: the depth its state needs on this GPU"
              if pp_in == PP_n else
              f"EP {format_number(ep)} kept inside NVLink, {format_number(pp_in)} stages where the state needs "
              f"{format_number(PP_n)}: any shallower, the DP sync on the NIC would outrun the compute"
              + (", and even here it does: the deepest the layers allow, a larger batch a step the next lever"
                 if exposed else ""))
    if not crosses:
        why = inside
    elif PP2_n >= pp_in:
        why = (f"{inside}; EP {format_number(2 * ep)} over two domains could hide its all-to-all, but the experts "
               "split twice as many ways need no fewer stages: crossing buys nothing")
    elif not run_wide:
        why = (f"{inside}; EP {format_number(2 * ep)} over two domains would need fewer stages, but its all-to-all "
               "and the DP sync together outrun the compute on the NIC")
    else:
        why = (f"EP {format_number(2 * ep)} over two domains, its all-to-all and the DP sync hidden under the "
               f"compute: {format_number(pp_wide or 0)} stages where EP {format_number(ep)} inside NVLink needs "
               f"{format_number(pp_in)}")
    if run_wide:
        plan = s.symbol("PP_2") if pp_wide == PP2_n else sympy.Integer(pp_wide or 0)
    else:
        plan = s.symbol("PP") if pp_in == PP_n else s.symbol("PP_s")
    s.step("pipeline_plan", "Pipeline stages of the layout to run", "PP_plan", plan, "", why)
    _failure_modes(s, p, a_in, a_out, t_c, k, ep)
    _layout_regime(s, a_out, t_c, a_in, ep, int(s.value(s.symbol("PP"))), int(s.value(s.symbol("PP_2"))))




def _clear(s: Sheet, a, b) -> bool:
    """a and b at least 5% apart: an option judged on them is listed."""
    return s.compare(a, OPTION_CLEAR * b) >= 0 or s.compare(b, OPTION_CLEAR * a) >= 0


def _failure_modes(s: Sheet, p, a_in, a_out, t_c, k, ep: int) -> None:
    """The failure modes' lines are the question's fixed parameters: the option texts print them. An option
    whose figure lies within 5% of its line is not listed (judged None): its verdict would turn on the
    figures' tolerance."""
    key = "failure_modes"
    m, E = s.symbol("m"), s.symbol("E")
    n_2 = s.step("experts_per_gpu_2", "Routed experts per GPU, EP over two domains", "n_g2",
                 E / (2 * ep), "experts", "E over twice the EP group")
    stretch = s.step("hot_stretch_2", "MoE layer stretched by the hottest expert, EP over two domains", "S_hot2",
                     (m + (n_2 - 1) * (E - m) / (E - 1)) / n_2, "x",
                     "the same hot expert diluted over half as many experts a GPU")
    line = 1 + exact(p.imbalance)
    skewed, hot = s.compare(stretch, line) >= 0, s.value(stretch)
    s.judge(key, "Spread over two domains, router imbalance stretches each MoE layer by {imbalance} or more",
            skewed if _clear(s, stretch - 1, line - 1) else None,
            f"the hottest expert's GPU would run {format_number(hot, figures_against(hot, float(line)))}x the mean "
            f"with {format_number(s.value(n_2))} experts a GPU" + ("" if skewed else ": still diluted"))
    # Four domains, merged per domain: a token crosses once to each of the 3 other domains holding one of its k
    # experts, 3·(1 − (3/4)^k) copies, where two domains unmerged send k/2 over the same NIC a GPU.
    merged = s.step("a2a_nic_merged", "NIC all-to-all per step, EP over four domains, copies merged per domain",
                    "t_NIC_4m", a_out * 3 * (1 - sympy.Rational(3, 4) ** k) / (k / 2), "s",
                    "not the question's model: one copy to each other domain that holds one of a token's experts, "
                    "3·(1 − (3/4)^k) against the k/2 sent unmerged over two (DeepEP's normal kernels, forwarded over "
                    "NVLink there)")
    fits = s.compare(merged, t_c) < 0
    s.judge(key, "Merged per domain (a token crossing once to each domain holding one of its experts), EP over four "
            "domains would fit its NIC all-to-all under the compute", fits if _clear(s, merged, t_c) else None,
            f"{s.text(merged)} merged over four domains against {s.text(t_c)} of compute (two domains, a copy per "
            f"expert: {s.text(a_out)})" + ("" if fits else ": even merged, the NIC is the wall"))
    # Four domains unmerged: three in four of a token's k copies sit in another domain, 3k/4 against k/2.
    four = s.step("a2a_nic_four", "NIC all-to-all per step, EP over four domains, a copy per expert", "t_NIC_4",
                  a_out * sympy.Rational(3, 2), "s", "three in four of the copies cross the NIC, against one in two "
                  "over two domains")
    hidden = s.compare(four, t_c) < 0
    s.judge(key, "Spread over four domains, a copy per expert, overlap could still hide its NIC all-to-all",
            hidden if _clear(s, four, t_c) else None, f"{s.text(four)} over the NIC against {s.text(t_c)} of compute")
    fp8 = s.step("a2a_nic_fp8", "NIC all-to-all per step over two domains, the dispatch in FP8", "t_NIC_fp8",
                 a_out * FP8_DISPATCH, "s", "dispatch and its backward counterpart at 1 B a value (scales aside), the "
                 "combines in bf16: 3/4 of the bytes")
    hides = s.compare(fp8, t_c) < 0
    s.judge(key, "With the dispatch sent in FP8 both ways (the combine kept in bf16), overlap could hide EP over two "
            "domains", hides if _clear(s, fp8, t_c) else None,
            f"{s.text(fp8)} over the NIC against {s.text(t_c)} of compute")
    share = s.symbol("f_NVL")
    s.judge(key, "Even with EP inside NVLink, the all-to-all takes more than {a2a_share} of the serial step (compute "
            "plus all-to-all)",
            s.compare(share, exact(p.a2a_share)) > 0 if _clear(s, share, exact(p.a2a_share)) else None,
            f"{s.text(a_in)} against {s.text(t_c)} of compute: "
            f"{format_quantity(s.value(share), '%', figures_against(s.value(share), p.a2a_share))} of the serial step")


def _layout_regime(s: Sheet, a_out, t_c, a_in, ep: int, stages: int, stages_2: int) -> None:
    nic, comp, nvl = (s.text(x) for x in (a_out, t_c, a_in))
    # read12 (rf-m): the words keep to what the state and the all-to-all say; the depth to run, which the DP sync
    # can deepen (and the push asks), is not announced here.
    crossing = "only data parallelism and any pipeline stages cross the nodes"
    deeper = (f"the state still needs {format_number(stages)} stage{'s' if stages > 1 else ''} once rounded up to a "
              "power of two"
              if stages_2 == stages else
              f"the state needs {format_number(stages_2)} stages instead of {format_number(stages)}, half the "
              "pipeline's bubble, if the NIC can carry the DP sync beside it under the compute")
    stays = Side(
        "ep-stays-in-nvlink",
        f"Spread over two domains a copy per expert, the all-to-all would take {nic} a step over the NIC, more than "
        f"the {comp} of compute: not even a perfect overlap would hide it. Inside NVLink it takes {nvl}: EP "
        f"{format_number(ep)} stays in the domain: {crossing}.",
        "With a faster NIC, or slower compute per token, the NIC all-to-all would fit under the compute and a "
        "DualPipe-style overlap could hide an EP group spread over nodes.")
    could = Side(
        "ep-could-cross-nodes",
        f"Over two domains the all-to-all would take {nic}, under the {comp} of compute: a schedule that overlaps "
        f"them (DualPipe, interleaved 1F1B) could hide it, and EP {format_number(2 * ep)} halves the experts a GPU "
        f"keeps: {deeper} (Kimi K2 ran EP 16 over two nodes). Run back to back it would cost more than the "
        f"{nvl} inside NVLink.",
        "With faster GPUs or a higher MFU the compute shrinks below the NIC all-to-all, and EP has to stay "
        "inside NVLink.")
    # Near the boundary the key says the same: a margin named here would announce the push that follows.
    s.regime_by(a_out, t_c, tie="above", above=replace(stays, near=stays.summary),
                below=replace(could, near=could.summary))


def solve(p, s: Sheet) -> None:
    """Total against active for a large MoE: the training state follows the total, the FLOPs the active
    parameters; the pipeline depth the state forces with EP inside NVLink, what the all-to-all costs inside
    the domain and across two, and the failure modes a dense plan does not have."""
    model, gpu = p.model, p.gpu
    count = parameter_count(model)
    domain, G_n = scale_up_domain(gpu), int(p.gpus)
    ep = _ep_in_domain(model, domain, G_n)
    N = given_model_params(s, model)
    N_a = given_active_params(s, model)
    D = s.param("D", "tokens")
    G = s.param("G", "gpus")
    P = given_peak_flops(s, gpu, "bf16")
    mfu = s.param("MFU", "mfu")
    M = given_hbm_bytes(s, gpu)
    u = s.param("u", "usable")
    b = s.given("b_st", STATE_BYTES, "B", "training state per parameter (mixed-precision Adam)")
    b_z = s.given("b_z", SHARDED_BYTES, "B", "of it, fp32 master and moments (sharded over all GPUs)")
    S = s.step("total_state", "Training state of the whole model", "S", N * b, "TB",
               "every parameter, active for a token or not, keeps weights, gradients and Adam state")
    q = s.evaluate(S / (u * M))
    if abs(q - round(q)) < float(CEIL_CLEAR) * q:
        s.refuse_if_asked(("state_gpus",), "the state's GPUs lie within 0.05% of a whole number: the ceiling turns on "
                          "the shown figures")
    s.step("state_gpus", "GPUs just to hold the state", "G_min", ceil_of(S / (u * M)), "GPUs",
           "the state over each GPU's share of HBM for it, rounded up: storage follows the total")
    F = s.prerequisite("training-compute-budget", "F", FLOPS_PER_PARAM_TOKEN * s.value(N_a) * s.value(D), "FLOP",
                       "training FLOPs, 6·N·D with N the active parameters")
    T_c = s.step("compute_days", "Compute days", "T_c", F / (G * P * mfu), "days", "the FLOPs at the run's MFU")
    if s.compare(T_c, SHORT_RUN) < 0:  # read12 (rf-m): @42 drew 16,384 GB200 for 1.06 days of compute
        s.assume(f"{s.text(T_c)} of compute is short for a pretraining run of this size: real ones take weeks "
                 "(DeepSeek-V3, 14.8T tokens on 2,048 H800, 54 days), so a cluster this large would train a "
                 "larger model or more tokens, or run beside other jobs. What the layout turns on, the tokens a GPU "
                 "takes a step against the model and the links, is the same either way.")
    E_p = s.given("EP", ep, "GPUs", f"EP group inside one {format_number(domain)}-GPU NVLink domain")
    W_x = s.given("N_x", count.routed, "", "routed-expert parameters (from the config)")
    # The rest as hint 2 and the prompt's total define it, N − N_experts: a total stated rounded (Qwen3's 235B)
    # moves it by the rounding, as it moves the ZeRO slice.
    N_s = s.step("", "Parameters outside the routed experts", "N_s", N - W_x, "",
                 "the total less the routed experts: attention, embeddings, the dense and shared layers")
    room = s.step("room", "HBM per GPU for bf16 weights and grads", "R", u * M - b_z * N / G, "GB",
                  "the share of HBM for state, less this GPU's slice of the fp32 state (ZeRO-1 over all GPUs)")
    if s.value(room) <= 0:
        raise Reject("the fp32 optimizer state alone overflows the GPUs")
    need = s.step("pp_need", "Pipeline stages the state needs", "PP_min", (b - b_z) * (W_x / E_p + N_s) / room, "",
                  "each stage holds its layers' experts split EP ways and its share of the rest, in bf16 weights "
                  "and grads")
    # G and EP are powers of two, so the stage counts that divide the G/EP GPUs per EP rank are too.
    doublings = next(j for j in range(64) if s.compare(2**j, need) >= 0)
    j = s.given("j", doublings, "", "doublings: the least j with 2^j ≥ PP_min")
    PP = s.step("pipeline_stages", "Pipeline stages", "PP", 2**j, "",
                f"the fewest at least PP_min that divide the {format_number(G_n // ep)} GPUs per EP rank: "
                "a power of two")
    if s.value(PP) > model.layers // 2:
        raise Reject("the state needs more pipeline stages than the layers allow")
    ep_2 = 2 * ep
    if model.experts % ep_2 or G_n % ep_2:
        raise Reject("EP over two domains would not divide the experts or the GPUs")
    need_2 = s.step("pp_need_2", "Pipeline stages the state needs, EP over two domains", "PP_min2",
                    (b - b_z) * (W_x / (2 * E_p) + N_s) / room, "",
                    "the experts split twice as many ways, the rest as before")
    doublings_2 = next(j for j in range(64) if s.compare(2**j, need_2) >= 0)
    s.step("pipeline_stages_2", "Pipeline stages, EP over two domains", "PP_2", sympy.Integer(2)**doublings_2, "",
           "the fewest at least PP_min2, a power of two")
    s.step("state_per_gpu", "State per GPU at that depth", "S_gpu", (b - b_z) * (W_x / E_p + N_s) / PP + b_z * N / G,
           "GB", "bf16 weights and grads of its stage's slice, plus its ZeRO-1 slice of the fp32 state")
    _training_a2a(s, p, model, G, N_a, P, mfu, E_p, ep)

    s.assume("Mixed-precision Adam (16 B per parameter: ZeRO's 2 + 2 + 12; Kimi K2 trained with MuonClip, one "
             "moment instead of two); ZeRO-1 shards the fp32 master and "
             "moments over every GPU; the expert weights and grads split over the EP group and the pipeline "
             "stages, the rest over the stages only (replicated across the EP group, as attention is).")
    s.assume("All-to-all in bf16 both ways, four passes per MoE layer (dispatch and combine, forward and backward); "
             "a plain all-to-all, as the stage says: a copy crosses a link when its expert sits on another GPU, one "
             "for each routed expert, none merged per domain (DeepEP's normal kernels merge them, about a quarter of "
             "the NIC bytes at top-8: the select asks what that buys); no overlap with compute (Megatron's "
             "default; DualPipe-style overlap hides up to the compute time). Links at datasheet rate per direction, "
             "priced by bandwidth alone: congestion (incast at the GPUs holding hot experts, the slowest of many "
             "flows) and each call's fixed latency come on top, so the NIC figure is a floor.")
    if domain % ep:  # a 72-GPU NVL72 rack holds a power-of-two EP group and spares, not a whole number of them
        s.assume(f"{format_number(G_n)} GPUs on {format_number(domain)}-GPU racks: {format_number(G_n // ep)} racks "
                 f"running {format_number(ep)} GPUs each (EP {format_number(ep)} in the rack's NVLink), the other "
                 f"{format_number(domain - ep)} held as spares for failed GPUs.")
    s.slip("FLOPs counted with the total parameters", s.evaluate(N / N_a), on="compute_days")
    s.slip("state counted with the active parameters", s.evaluate(N_a / N), on="total_state")

