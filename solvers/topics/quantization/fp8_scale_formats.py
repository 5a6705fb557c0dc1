"""Block-scaled FP8 on two generations - FP32 scales, power-of-two scales, one tested model."""
from __future__ import annotations

import functools
from statistics import NormalDist

import numpy as np
import sympy

from solvers.derivation import Reject, Sheet, Side
from solvers.formulas.fp8 import E4M3, amax_scale, clipped, quantize, quantize_blocks, sqnr_db
from solvers.formulas.quantization import pct_text, seeded_rng, variant_key
from solvers.sheetmath import ceil_of, floor_of
from solvers.units import format_number

FORMAT_BLOCKS = 1024  # rows of 128 in the simulation: 131,072 values per distribution (32 rows left the FP32
# reference 2 dB apart between a variant and its push)


SAT_BLOCKS = 4096  # blocks in the saturating-share sample: its binomial noise under 0.7 points


SAT_SHAPES = 256  # distinct blocks drawn for it, each placed at 16 magnitudes


HOPPER_BLOCK = 128  # DeepSeek-V3: 1x128 activation tiles, 128x128 weight blocks, FP32 scales


MX_BLOCK = 32  # OCP MX: 32 elements per E8M0 scale


SCALE_RULES = {  # each E8M0 rule, and where it lands a block's amax
    "ocp-mx": "2^(floor(log2 amax) − 8): amax lands in [256, 512)",
    "up": "2^ceil(log2(amax/448)): amax lands in (224, 448]",
    "nearest": "2^round(log2(amax/448)): amax lands in [448/√2, 448·√2)",
}


def _scale_rule_steps(s: Sheet, rule: str, x_max) -> tuple[sympy.Symbol, sympy.Symbol]:
    """Where the pool's E8M0 rule lands the stem's block (its amax over the power-of-two scale), the worst factor
    by which any block's amax passes max, and the share of blocks it does (the amax's position in its binade taken
    log-uniform)."""
    e = s.given("e_max", E4M3.max_exponent, "", "exponent of E4M3's largest binade (448 = 1.75·2^8)")
    a = s.param("a", "amax")
    if rule == "ocp-mx":
        exp = floor_of(sympy.log(a, 2)) - e
        over, share = 2 ** (e + 1) / x_max, 1 - sympy.log(x_max / 2**e, 2)
        why = "amax/2^floor(log2 amax) spans [1, 2) evenly in log: past 1.75 it lands beyond 448"
    elif rule == "up":
        exp = ceil_of(sympy.log(a / x_max, 2))
        over, share = sympy.Integer(1), sympy.Integer(0)
        why = "rounding the scale up never maps amax past 448"
    else:
        exp = floor_of(sympy.log(a / x_max, 2) + sympy.Rational(1, 2))
        over, share = sympy.sqrt(2), sympy.Rational(1, 2)
        why = "half the time log2(amax/448) rounds down, and amax lands past 448"
    k = s.step("block_exponent", "E8M0 exponent of the block's scale", "k", exp, "", SCALE_RULES[rule].split(":")[0])
    s.step("block_landing", "Where the block's amax lands on the E4M3 grid", "a_s", a / 2**k, "",
           "the amax over its power-of-two scale: past 448 it saturates to 448")
    overshoot = s.step("act_overshoot", "Worst landing of a block's amax, over max", "k_over", over, "x",
                       SCALE_RULES[rule])
    return overshoot, s.step("act_saturating_share", "Share of activation blocks whose amax saturates", "s_sat",
                             share, "%", why)


def _format_blocks(rng: np.random.Generator, tail: str, rows: int = FORMAT_BLOCKS,
                   width: int = HOPPER_BLOCK) -> np.ndarray:
    """`rows` rows of `width` (a token's channels), each row at its own magnitude over 8 binades."""
    shape = (rows, width)
    x = rng.standard_normal(shape) if tail == "gaussian" else rng.standard_t(3, shape)
    return x * np.exp2(rng.uniform(0, 8, (rows, 1)))


@functools.lru_cache(maxsize=64)
def _emulation(seed_key: str, act_block: int, mx_rule: str) -> dict[str, tuple[float, float, float]]:
    """The seeded E4M3 emulation's figures per distribution tag, g (Gaussian) and t (Student-t, 3 dof):
    (reference SQNR, pool SQNR, saturating share), and under "conv" the Gaussian values' SQNR after
    re-rounding FP32-scaled weights onto round-up power-of-two scales. Kept by its inputs: the float
    trial of a draw, its exact solve and a push's scans that leave the pool's rule alone run it once."""
    rng = seeded_rng(seed_key)
    found: dict[str, tuple[float, float, float]] = {}
    values = {}
    for tail, tag in (("gaussian", "g"), ("t3", "t")):
        x = values[tag] = _format_blocks(rng, tail)
        ref = quantize_blocks(x, E4M3, HOPPER_BLOCK, "fp32")
        pool = quantize_blocks(x, E4M3, act_block, mx_rule)
        # The saturating share on its own larger sample (a few dozen blocks would leave it several points off
        # the closed form): SAT_SHAPES blocks' amaxes, each at SAT_BLOCKS/SAT_SHAPES magnitudes over 8 binades.
        shapes = np.max(np.abs(_format_blocks(rng, tail, SAT_SHAPES, act_block)), axis=1)
        amax = np.repeat(shapes, SAT_BLOCKS // SAT_SHAPES) * np.exp2(rng.uniform(0, 8, SAT_BLOCKS))
        found[tag] = sqnr_db(x, ref), sqnr_db(x, pool), float(np.mean(clipped(amax, E4M3, amax_scale(
            amax, E4M3, mx_rule))))
    gaussian = values["g"]  # no draw from here on: the order of the draws above is the variant's
    scale = amax_scale(np.max(np.abs(gaussian), axis=1, keepdims=True), E4M3, "fp32")
    once = quantize(gaussian, E4M3, scale)
    twice = quantize(once, E4M3, amax_scale(np.max(np.abs(once), axis=1, keepdims=True), E4M3, "up"))
    found["conv"] = (sqnr_db(gaussian, twice), 0.0, 0.0)
    return found


def _format_simulation(s: Sheet, p) -> dict[str, tuple[float, float]]:
    """Seeded E4M3 emulation on Gaussian and Student-t (3 dof) blocks: the Hopper reference (FP32
    scales per 128), this pool's activation path, and FP32-scaled weights re-rounded onto power-of-two
    scales; SQNR in dB and the share of blocks whose amax saturates. Returns (reference, pool) SQNR
    per distribution."""
    # Seeded without the rule: a push that moves only the rule compares on the same values.
    found = _emulation(variant_key(p, "hopper_scales", "act_block"), p.act_block, p.mx_rule)
    for tag, name in (("g", "Gaussian"), ("t", "Student-t (3 dof)")):
        source = (f"seeded E4M3 emulation, {FORMAT_BLOCKS * HOPPER_BLOCK:,} {name} values in rows of 128 over 8 "
                  "binades (seed from the variant)")
        s.given(f"S_ref_{tag}", found[tag][0], "dB", f"{source}: SQNR, FP32 scales per 128")
        s.given(f"S_pool_{tag}", found[tag][1], "dB",
                f"the same values through this pool: {p.mx_rule} E8M0 scales per {p.act_block}")
        s.given(f"s_sat_{tag}", found[tag][2], "%", f"the same emulation, {SAT_BLOCKS:,} {name} blocks of "
                f"{p.act_block} ({SAT_SHAPES} drawn, each at 16 magnitudes over 8 binades): share whose amax "
                f"saturates under the {p.mx_rule} rule")
        if tag == "g":
            s.given("S_conv_g", found["conv"][0], "dB",
                    "the Gaussian values FP32-scaled, then re-rounded onto round-up power-of-two scales")
    return {"gaussian": found["g"][:2], "t3": found["t"][:2]}


BIG_ENOUGH = "the {eval_set} prompts of the team's eval set are enough for this gate"
HALF_DROP = "the team's eval set could still gate a drop half this size"
HALF_DISCORDANT = "the team's eval set would be enough if the builds disagreed half as often"
SAME_CODES = "the pool's fast path feeds the MMA the tested build's activation codes"
OWN_GATE = "this pool's build has to pass the gate itself, whatever bytes it loads"
MARGIN = 0.05  # how close a gate's prompts may come to the eval set before the normal approximation decides it


def _gate(s: Sheet, p):
    """The paired eval a build must pass: McNemar's test on the prompts the two builds answer differently,
    sized by the normal approximation to catch the drop at the stated false-alarm rate and power."""
    d, delta = s.param("d", "discordant"), s.param("Delta", "delta")
    alpha, power = s.param("alpha", "alpha"), s.param("beta_1", "power")
    z_a = s.given("z_a", round(NormalDist().inv_cdf(1 - float(p.alpha)), 4), "", "one-sided normal quantile of the "
                  "false-alarm rate")
    z_b = s.given("z_b", round(NormalDist().inv_cdf(float(p.power)), 4), "", "normal quantile of the power")
    del alpha, power  # the quantiles stand for them
    n = s.step("eval_prompts", "Prompts the gate needs", "n", ceil_of((z_a + z_b) ** 2 * d / delta**2), "",
               "only discordant prompts move the paired difference: its noise is √(d/n), and the drop must stand "
               "z_a + z_b of it clear; rounded up to whole prompts")
    n_half_drop = s.step("", "Prompts to gate half the drop", "n_2", ceil_of((z_a + z_b) ** 2 * d / (delta / 2) ** 2),
                         "", "the noise must shrink with the drop: four times the prompts")
    n_half_d = s.step("", "Prompts if the builds disagreed half as often", "n_d", ceil_of((z_a + z_b) ** 2 * (d / 2)
                      / delta**2), "", "half the discordant prompts, half the noise power: half the prompts")
    return n, n_half_drop, n_half_d


def _gate_judgements(s: Sheet, p, n, n_half_drop, n_half_d) -> None:
    """The gate's select: the eval set against the gate it must run, at this drop and discordance and at half of
    each, whether the pool's fast path sees the tested activation codes, and (a declared fact) that every pool's
    build is gated itself."""
    n_set = s.param("n_set", "eval_set")
    for option, need, what in ((BIG_ENOUGH, n, "the gate needs"), (HALF_DROP, n_half_drop, "half the drop needs"),
                               (HALF_DISCORDANT, n_half_d, "half the discordance needs")):
        s.judge("gates", option, s.compare(need, n_set) <= 0, f"{what} {s.text(need)} against {s.text(n_set)}")
        if abs(s.value(need) / s.value(n_set) - 1) < MARGIN:
            raise Reject(f"{what} within 5% of the eval set: whether it is big enough would turn on the normal "
                         "approximation")
    same_codes = p.hopper_scales == "ue8m0" and p.mx_rule == "up" and p.act_block == HOPPER_BLOCK
    tested = "round-up power-of-two scales per 128" if p.hopper_scales == "ue8m0" else "FP32 scales per 128"
    s.judge("gates", SAME_CODES, same_codes,
            f"the pool's activations take {p.mx_rule} E8M0 scales per {p.act_block}; the tested build's took "
            f"{tested}" + (": the same scale on every block, so the same codes" if same_codes else
                           ": other scales, so other codes"))
    s.judge("gates", OWN_GATE, True, "the block-scaled MMA applies scales and accumulates inside the tensor core, "
            "unlike Hopper's promoted WGMMA: even the tested bytes are not the tested numerics", fact=True)


def _format_regime(s: Sheet, p, overshoot, losses: dict[str, tuple[float, float]]) -> None:
    land = format_number(s.value(overshoot), 3)
    share = pct_text(s.number("act_saturating_share"))
    normal = format_number(s.number("sqnr_normal"), 3)
    emulated = (f"the emulation (closed form {normal} dB in the normal range) gives " + "; ".join(
        f"{format_number(pool, 3)} dB through the pool against {format_number(ref, 3)} dB with FP32 scales per 128 "
        f"on {name} blocks" for name, (ref, pool) in (("Gaussian", losses["gaussian"]),
                                                       ("heavy-tailed", losses["t3"]))))
    tails = ("; on heavy tails FP32 scales keep an edge whatever the rule: they put each block's amax exactly on "
             "448, and that one value carries much of a heavy-tailed block's power")
    saturating = (f"The {p.mx_rule} rule can land a block's amax {land}× past 448, and does in {share} of blocks: "
                  f"the largest values, the ones that carry the signal, saturate; {emulated}{tails}. Round the scale "
                  "up instead (NVIDIA's MXFP8 recipe, DeepGEMM's UE8M0).")
    clip_free = (f"Rounding the scale up maps every block's amax into (224, 448]: nothing saturates, and the values "
                 f"keep the same relative grid at any scale: {emulated}{tails}.")
    s.regime_by(overshoot, 1, boundary_label="amax landing exactly on max", tie="below", above=Side(
        "saturating", saturating,
        "Rounding the scale up never saturates: it leaves up to one binade unused at the top, and the values keep "
        "the same relative grid: on bell-shaped blocks it costs next to nothing against FP32 scales.",
        near=saturating),
        below=Side(
        "clip-free", clip_free,
        "The OCP MX rule (floor of log2 amax, minus 8) lands amax in [256, 512): one block in five saturates its "
        "largest values, and rounding the scale to nearest does worse, one in two.", near=clip_free))


def solve(p, s: Sheet) -> None:
    """One FP8 checkpoint, two pools: Hopper's FP32 block scales against Blackwell's MXFP8 E8M0 scales,
    what converting costs, what the pool's scale rule clips, and which pool serves the tested model."""
    m = s.given("m", E4M3.mantissa_bits, "", "fraction bits of E4M3")
    x_max = s.given("x_max", E4M3.max, "", "largest E4M3 value")
    S0 = s.step("sqnr_normal", "SQNR of E4M3 rounding in the normal range", "S_0",
                10 * sympy.log(12 * 4**m * 3 / (2 * sympy.log(2)), 10), "dB",
                "an error of quantum²/12 against a signal of f²·2^2e, for significands f spread log-uniformly over "
                "[1, 2) (E[f²] = 3/(2 ln 2)): 12·4^m·E[f²], whatever the block's scale")
    s.step("", "Scale bits per element, Hopper activations (FP32 per 1×128)", "q_act", 32 / sympy.Integer(128),
           "", "one 32-bit scale per 128 values")
    s.step("", "Scale bits per element, Hopper weights (FP32 per 128×128)", "q_w", 32 / sympy.Integer(128 * 128),
           "", "one scale per 16,384 weights: negligible")
    s.step("", "Scale bits per element, MXFP8 (E8M0 per 32)", "q_mx", 8 / sympy.Integer(MX_BLOCK), "",
           "as many bits as Hopper's activations: the gain is hardware that applies them inside the MMA")
    if p.hopper_scales == "fp32":
        loss = s.step("", "SQNR lost re-rounding FP32-scaled weights onto power-of-two scales", "dS",
                      10 * sympy.log(2, 10), "dB",
                      "a second rounding onto a grid shifted by a non-power-of-two factor: an independent error "
                      "as large as the first, so the noise power doubles")
        s.step("sqnr_weights_blackwell", "SQNR of the weights as the Blackwell pool holds them", "S_w", S0 - loss,
               "dB", "the tested weights, converted: a model nobody evaluated")
    else:
        loss = s.given("dS", 0, "dB", "SQNR lost loading power-of-two scales into E8M0: none")
        s.step("sqnr_weights_blackwell", "SQNR of the weights as the Blackwell pool holds them", "S_w", S0, "dB",
               "the scales are powers of two already: E8M0 holds them exactly, each 128-block as four MX blocks, "
               "and the tested bytes load unchanged")
    overshoot, share = _scale_rule_steps(s, p.mx_rule, x_max)
    if p.mx_rule == "nearest":  # the push's what-if: a team's next try, which no pool ships to open with
        s.refuse_if_asked(("sqnr_weights_blackwell", "eval_prompts"), "rounding the scale to nearest is the push's "
                          "what-if, not a pool's rule to open with")
    losses = _format_simulation(s, p)
    del loss  # the SQNR step says it
    _gate_judgements(s, p, *_gate(s, p))

    s.assume("Hopper's block-scaled FP8 as in DeepSeek-V3: E4M3 everywhere, activations in 1×128 tiles quantised "
             "online, weights in 128×128 blocks, FP32 scales applied on CUDA cores between 128-deep WGMMA "
             "chunks. A 'ue8m0' checkpoint (DeepSeek-V3.1) keeps the same blocks with power-of-two scales, "
             "rounded up for weights and activations alike (DeepGEMM).")
    s.assume("Blackwell's fast path is MXFP8 in the tensor cores' block-scaled MMA (tcgen05 kind::mxf8f6f4): E4M3 "
             "elements with one E8M0 scale per 32 along K; a 1×128 scale is fed as four equal MX scales. Blackwell "
             "can also run the tested FP32-scaled bytes unchanged, on a blockwise kernel that promotes partial sums "
             "in software (CUTLASS's sm100 blockwise GEMM, the path vLLM takes for DeepSeek-V3's FP8 checkpoint): "
             "slower than the block-scaled MMA, and still its own eval. The question prices the fast path.")
    s.assume("A block's amax sits anywhere in its binade, log-uniformly (activations span many binades): this sets "
             "the share of saturating blocks. The SQNR figure is the normal range's; clipping and subnormals are "
             "what the simulation adds. FP32-scaled weights convert onto E8M0 scales rounded up (no weight clips).")
    s.assume("Users reach the Blackwell pool only after its build passes its own eval, whatever its bytes: the "
             "block-scaled MMA applies scales and accumulates inside the tensor core, where Hopper's WGMMA "
             "promotes partial sums to CUDA cores every 128, so no Blackwell build computes the tested numerics.")
    s.assume("The gate is a paired eval (McNemar's test on the prompts the builds answer differently), sized by the "
             "normal approximation n = (z_a + z_b)²·d/Δ², which leaves out the small −Δ² under the power's root "
             "(under 2% of n for these drops). Greedy decoding with batch-invariant kernels, so a prompt's answer "
             "is fixed per build; a batched engine without them flips some answers from run to run, and an A/A run "
             "(the tested build against itself) measures that floor under d before the A/B is sized.")
    if p.mx_rule == "ocp-mx":
        s.slip("the OCP rule taken as floor(log2(amax/448)): every block saturating", 1 / s.value(share),
               on="act_saturating_share")
    if p.hopper_scales == "fp32":
        s.slip("the conversion taken as free", s.value(S0) / s.number("sqnr_weights_blackwell"),
               on="sqnr_weights_blackwell")
    _format_regime(s, p, overshoot, losses)

