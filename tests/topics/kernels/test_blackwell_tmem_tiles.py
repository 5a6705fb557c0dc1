"""blackwell-tmem-tiles: its keys and behaviour, checked outside the solver."""
from __future__ import annotations

import pytest

from solvers.interview import stage_run
from tests.by_hand import param_values


def _mma_stream(m: int, n: int, kind: str, k_slice: int, elem: int) -> tuple[int, int]:
    """(operand bytes one SM reads from shared memory, FLOPs it does) over one k-slice, instruction by
    instruction: Hopper's wgmma is 64 rows, Blackwell's 1-SM tcgen05.mma 128 rows, and the 2-CTA form a
    256-row MMA over an SM pair of which this SM holds 128 rows of A and half of B."""
    rows, b_share = {"hopper": (64, 1), "one": (128, 1), "two": (128, 2)}[kind]
    read = flops = 0
    for _ in range(m // rows):  # one MMA per slab of rows, each reading its A rows and (its share of) B
        for _ in range(k_slice // (16 * 2 // elem)):  # instruction k: 32 B of each row
            k = 16 * 2 // elem
            read += (rows * k + n * k // b_share) * elem
            flops += 2 * rows * n * k
    return read, flops


@pytest.mark.parametrize("seed", range(40))
def test_tmem_tile_figures_follow_the_instruction_stream(variant, seed):
    """Per k-slice bytes and bytes per clock, summed MMA instruction by MMA instruction (the process the closed
    forms summarise), at each GPU's FLOP per clock for the drawn dtype."""
    solution = variant(f"blackwell-tmem-tiles@{seed}")
    p, r = param_values(solution), solution.sheet.results
    m, n, dtype = p["tile_m"], p["tile_n"], p["dtype"]
    elem = 1 if dtype == "fp8" else 2
    rate = f"{dtype}_flop_per_clk_sm"
    for kind, gpu, key in (("hopper", p["hopper"], "hopper"), ("one", p["blackwell"], "one_sm"),
                           ("two", p["blackwell"], "two_cta")):
        read, flops = _mma_stream(m, n, kind, 128 // elem, elem)
        assert r[f"{key}_bytes"] == pytest.approx(read)
        assert r[f"{key}_demand"] == pytest.approx(read * getattr(gpu, rate) / flops)
    assert r["regime"] == ("smem-bound" if r["one_sm_demand"] >= 128 else "tensor-bound")
    assert r["regime"] == ("smem-bound" if n <= 128 else "tensor-bound")  # 64 (128 + N) / N >= 128
    assert r["rf_share"] == pytest.approx(m * n * 4 / (256 * 1024))
    assert r["acc_registers"] == m * n / 256
    assert m == 128  # 128 rows a SM on both parts (a 1-SM tcgen05.mma is at most 128 rows)
    assert r["tmem_buffers"] == 512 // n  # allocated once, each accumulator at its own column offset
    assert r["loop_saving"] == pytest.approx(m // 128 * n // 2 * p["k"] * elem)


@pytest.mark.parametrize("n", [64, 128, 192, 256])
def test_operand_bytes_per_clock_depend_on_neither_m_nor_dtype(variant, n):
    """Bytes per clock are set per MMA instruction: doubling M doubles the bytes and the FLOPs alike, and fp8
    doubles the elements of a 128-byte row and the FLOP rate alike."""
    runs = [variant(f"blackwell-tmem-tiles@default+tile_m={m}+tile_n={n}+dtype={d}").sheet.results
            for m in (128,) for d in ("bf16", "fp8")]
    for key in ("hopper_demand", "one_sm_demand", "two_cta_demand"):
        assert all(r[key] == pytest.approx(runs[0][key]) for r in runs)
    assert runs[0]["two_cta_demand"] == pytest.approx(64 * (128 + n / 2) / n)  # 8,192 FLOP/clock, B split in two


@pytest.mark.parametrize("seed", range(40))
def test_tmem_tile_facts_follow_the_variant(variant, seed):
    """Each option of the Blackwell select, recomputed from the tile: stages from the 227 KiB one block may take
    (of the SM's 228), and the 2-CTA form's pace on the drawn tile (read4-R3: the 2-CTA rescue of N = 96-128 was
    asked only after widening, where it cannot change anything; the ratio-of-stages option it replaces flipped on
    floor rounding). Every tile has an option that holds."""
    solution = variant(f"blackwell-tmem-tiles@{seed}")
    p, r = param_values(solution), solution.sheet.results
    m, n = p["tile_m"], p["tile_n"]
    truth = r["tile_facts"]
    stages_one, stages_two = 227 * 1024 // ((m + n) * 128), 227 * 1024 // ((m + n // 2) * 128)
    assert (r["stages_one"], r["stages_two"]) == (stages_one, stages_two)
    assert p["deep"] == 5
    two_under = truth["on the 2-CTA form this tile's reads per SM come under shared memory's rate"]
    assert two_under == (32 + 8192 / n < 128) == (n >= 96)
    assert truth["the 1-SM form's ring has no room for {deep} K-block stages in the shared memory one block may "
                 "take"] == (stages_one < 5) == (n >= 240)
    assert truth["TMEM holds three or more of this tile's FP32 accumulators at once (one allocation, each at its own "
                 "column offset)"] == (512 // n >= 3) == (n <= 160)
    assert any(truth.values())


def test_tmem_read10_every_select_option_turns_on_the_draw(variant):
    """read10 (report-2): "the 1-SM MMA asks fewer B/clk than Hopper" was false in every draw (q_1 / q_H =
    2(N + M)/(2N + M) > 1), a declared fact no draw could flip. It is replaced by TMEM's accumulator count (three
    or more for N of 160 or less), and the ring is asked as having no room for 5 stages (N of 240 up), not holding 6,
    whose line (N of 160 or less) TMEM's three would always agree with. The 2-CTA option stays: false at N = 64 and
    80 (about one draw in eight), the rescue question on the drawn tile. Over 200 draws each option takes both
    truths, no two always agree, none is a declared fact, and no tile is refused for want of a true and a false
    option (every N from 64 to 256 is still drawn)."""
    truths, drawn = [], set()
    for seed in range(200):
        solution = variant(f"blackwell-tmem-tiles@{seed}")
        truths.append(solution.sheet.results["tile_facts"])
        drawn.add(param_values(solution)["tile_n"])
        assert not solution.sheet.facts.get("tile_facts")
    options = list(truths[0])
    assert not any("fewer bytes per clock than Hopper" in option for option in options)
    for option in options:
        assert {t[option] for t in truths} == {True, False}, option
    for i, a in enumerate(options):
        for b in options[i + 1:]:
            assert any(t[a] != t[b] for t in truths), (a, b)
    assert drawn == set(range(64, 257, 16))


def test_tmem_read10_blackwell_smem_rate_is_a_working_assumption(variant, catalog):
    """read10 (report-2): 128 B a clock per SM for B200's tcgen05 operand reads is unpublished (an inference public
    analyses share), yet was stated as fact ("shared memory's bandwidth did not grow"). The Given row and an
    assumption mark it a working assumption for Blackwell, as F_B is; the stage's hint says so too."""
    solution = variant("blackwell-tmem-tiles@7")
    sheet = solution.sheet
    label = next(g for g in sheet.givens if g.symbol == "S_smem").label
    assert "working assumption" in label and "B200" in label
    assert any("working assumption" in a and "publishes no rate" in a for a in sheet.assumptions)
    assert not any("did not grow" in why for why in sheet.reasons["tile_facts"].values())
    assert any("working assumption" in hint for hint in solution.question.stages[2].hints)


def test_tmem_two_cta_is_asked_where_it_can_rescue(variant):
    """read4-R3: the 2-CTA form changes the pace only on a tile the 1-SM form leaves to shared memory and it brings
    under (N = 96-128). It is asked at the drawn tile (the select) and in the narrowing push, which lands on both
    sides of its line; the widening push, where 1-SM is tensor-bound already, no longer asks it."""
    solution = variant("blackwell-tmem-tiles@9701")
    widen, narrow = [stage for stage in solution.question.stages if stage.when]
    assert "two_cta_regime" not in widen.ask and "two_cta_regime" in narrow.ask
    rescued = {n: variant(f"blackwell-tmem-tiles@default+tile_n={round(n / 2.25 / 16) * 16}").sheet.results
               ["two_cta_regime"] for n in range(144, 257, 16)}
    assert set(rescued.values()) == {"smem-bound", "tensor-bound"}


@pytest.mark.parametrize("seed", range(30))
def test_tmem_push_crosses_the_shared_memory_line(variant, seed):
    """The declared push doubles a tile that shared memory holds back and divides one the tensor cores run by 2.25
    (read3-R1: halving took 240 and 256 to 128, the exact tie): it crosses wherever the moved N stays in range and
    leaves its side (all but N = 64, whose double ties at 128), and no narrowed tile lands on the tie."""
    solution = variant(f"blackwell-tmem-tiles@{seed}")
    n = param_values(solution)["tile_n"]
    moved = n * 2 if n <= 128 else round(n / 2.25 / 16) * 16
    pushed = variant(f"blackwell-tmem-tiles@{seed}+tile_n={moved}").sheet.results
    assert (pushed["regime"] != solution.sheet.results["regime"]) == (n != 64)
    assert n <= 128 or (64 <= moved < 128 and pushed["one_sm_demand"] > 128)


@pytest.mark.parametrize("n", range(64, 257, 16))
def test_two_cta_pace_has_its_own_line(variant, n):
    """read3-R1 (@9602: whether the 2-CTA form rescues N = 64 was never asked): its pace is graded, on its own line,
    32 + 8,192/N against 128 (N = 85.3, never a tie on a multiple of 16): smem-bound at 64 and 80 where the 1-SM
    form is too, tensor-bound from 96, so it rescues 96-128 and nothing narrower."""
    r = variant(f"blackwell-tmem-tiles@default+tile_n={n}").sheet.results
    assert r["two_cta_demand"] == pytest.approx(32 + 8192 / n) and r["two_cta_demand"] != 128
    assert r["two_cta_regime"] == ("smem-bound" if n <= 80 else "tensor-bound")


def test_tmem_the_tie_rule_is_said_where_a_tie_can_be_drawn(variant, catalog):
    """r1 (@7301): the push halved N = 240 to 128, where the 1-SM MMAs read exactly shared memory's 128 B a
    clock; the tie rule sat only in a hint. Reader 7 (finding 4): said again in every push it read as a worksheet.
    The stage that can draw N = 128 says it; no push lands within the answer's tolerance of the line (widening
    gives 160-256, narrowing 64-112), so the pushes ask in plain words, and the tie itself keys smem-bound."""
    solution = variant("blackwell-tmem-tiles@7301")
    asking = [stage for stage in solution.question.stages if "regime" in stage.ask]
    assert len(asking) == 3
    assert "a tie goes to shared memory" in asking[0].say
    assert all("tie" not in stage.say for stage in asking[1:])
    for n in range(64, 257, 16):
        pushed = stage_run(variant(f"blackwell-tmem-tiles@default+tile_n={n}"), catalog, 3)
        if pushed is None:
            pushed = stage_run(variant(f"blackwell-tmem-tiles@default+tile_n={n}"), catalog, 4)
        demand = pushed.solution.expected["one_sm_demand"]
        assert abs(demand / 128 - 1) > 0.05 and "tie" not in pushed.say, (n, demand)
    tied = variant("blackwell-tmem-tiles@7301+tile_n=128").sheet.results
    assert tied["one_sm_demand"] == 128 and tied["regime"] == "smem-bound"


@pytest.mark.parametrize("n,k,dtype",
                         [(256, 7168, "bf16"), (96, 4096, "bf16"), (256, 18432, "fp8"), (176, 2048, "fp8")])
def test_tmem_reader7_k_feeds_a_graded_answer(variant, n, k, dtype):
    """Reader 7 (finding 6): K was drawn and printed but fed only an unasked step. Stage 3 now grades what the 2-CTA
    form spares each SM over the K loop: half of B, N/2 columns × K × the element's bytes (1.75 MiB at the
    default), so K moves a graded answer."""
    solution = variant(f"blackwell-tmem-tiles@default+tile_n={n}+k={k}+dtype={dtype}")
    elem = 2 if dtype == "bf16" else 1
    assert solution.expected["loop_saving"] == pytest.approx(n // 2 * k * elem)
    assert "loop_saving" in solution.question.stages[2].ask and "{k}" in solution.question.stages[2].say


def test_tmem_reader7_b200_rate_is_said_to_be_unpublished(variant):
    """Reader 7 (finding 5): B200's 8,192 / 16,384 FLOP a clock a SM come from a clock NVIDIA does not publish. The
    Given row says so, and an assumption derives it from published figures (148 SMs, the datasheet's dense peak)
    and says the paces turn on the 2x ratio to Hopper."""
    for dtype, peak in (("bf16", "2,250"), ("fp8", "4,500")):
        sheet = variant(f"blackwell-tmem-tiles@default+dtype={dtype}").sheet
        assert "unpublished" in next(g for g in sheet.givens if g.symbol == "F_B").label
        (said,) = [a for a in sheet.assumptions if "publishes no FLOP per clock" in a]
        assert peak in said and "148 SMs" in said and "2× ratio" in said


def test_tmem_reader7_words(variant, catalog):
    """Reader 7 (findings 4, 7, 3): stage 1 asked four things in worksheet shorthand ("what must shared memory feed
    ..., and how much a clock?"); the assumption called CUTLASS's standard 128 x 256 cooperative tile "not a kernel
    one would build"; the recall list did not credit tcgen05.ld; a strong candidate names split-K or stream-K as
    the other way to fill the SMs than a narrow tile, and the 2-CTA pair tile's 256 rows cost small-M GEMMs."""
    solution = variant("blackwell-tmem-tiles@default")
    opening = stage_run(solution, catalog, 0).say
    assert "how much a clock" not in opening and "how many registers a thread" in opening
    assert not any("not a kernel one would build" in a for a in solution.sheet.assumptions)
    assert any("standard 128 × 256 tile" in a for a in solution.sheet.assumptions)
    assert any("tcgen05.ld" in item for item in solution.question.answer("blackwell_list").points)
    for n, verdict in ((96, "tensor-bound"), (80, "smem-bound")):
        narrowed = variant(f"blackwell-tmem-tiles@default+tile_n={n}")
        assert narrowed.expected["two_cta_regime"] == verdict
        assert "split-K" in narrowed.sheet.choice_whys["two_cta_regime"]


def test_tmem_narrow_push_lands_on_four_tiles_and_rescue_varies(variant, catalog):
    """read11 report 2 said the narrowing push always lands on N = 80 (its two tensor-bound variants drew 176 and
    192). Over the drawn tensor-bound tiles (144-256) the push's ÷2.25 lands on 64, 80, 96 and 112, and the 2-CTA
    form rescues the last two only: the rescue is a judgement, not a constant. Kept, said here."""
    landed, rescued = set(), set()
    for n in range(144, 257, 16):
        pushed = stage_run(variant(f"blackwell-tmem-tiles@default+tile_n={n}"), catalog, 4)
        assert pushed is not None and pushed.regime == "smem-bound"
        landed.add(pushed.solution.param("tile_n").raw)
        rescued.add(pushed.solution.expected["two_cta_regime"])
    assert landed == {64, 80, 96, 112}
    assert rescued == {"smem-bound", "tensor-bound"}


def test_tmem_words_are_an_interviewers_not_a_worksheets(variant):
    """read11 report 2: 'Which of these hold?' sat in stage 3's words and again as the select's label; 'a tie goes to
    shared memory' four times (the 2-CTA option's line, 32 + 8,192/N = 128 at N = 85.3, is never on the grid of 16,
    so the option needs no tie rule); 'per k-slice of 128 B a row' read as a form; the narrowing push's 'for more
    tiles' defeated itself (a 2-CTA tile is twice as tall: fewer tiles). A from TMEM joins the recall list."""
    question = variant("blackwell-tmem-tiles@12").question
    texts = [stage.say for stage in question.stages] + [hint for stage in question.stages for hint in stage.hints]
    assert "Which of these hold" not in question.stages[2].say
    assert sum(text.count("a tie goes to shared memory") for text in [stage.say for stage in question.stages]) == 1
    assert not any("tie" in option for option in question.answer("tile_facts").pool)
    assert not any("k-slice" in text for text in texts)
    assert "more tiles" not in question.stages[4].say
    assert any("A may come from TMEM" in item for item in question.answer("blackwell_list").points)
