"""Tensor-parallel communication: the all-reduces a TP group runs in every forward pass.

The conventions card (tp-all-reduce) states the model: two all-reduces per layer, each of
tokens × hidden × 2 bytes, over a ring that sends 2(n−1)/n of the message across each GPU's
link in each direction, plus a fixed latency per call. The link is NVLink while the group
fits the GPU's scale-up domain (hardware.yaml `nvlink_domain`) and the NIC once it leaves it:
that is why TP past the domain is rarely worth it. A pipeline's stages send each token's hidden
state to the next stage over the same links (stage_send)."""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from solvers.conventions import convention, convention_value, scale_up_domain
from solvers.data import Record
from solvers.derivation import Reject, Sheet
from solvers.formulas.common import fabric_name, given_config, given_nvlink

ACTIVATION_BYTES = 2  # bf16 activations cross the link


def crosses_domain(gpu: Record, tp: int) -> bool:
    """Whether a TP group of `tp` GPUs leaves the GPU's NVLink domain."""
    return tp > scale_up_domain(gpu)


def _suffix(name: str, group: str) -> str:
    return f"{name}_{group}" if group else name


def link_bandwidth(s: Sheet, gpu: Record, tp: int, nic: Record | None = None, group: str = "") -> sympy.Symbol:
    """Bandwidth each direction of the link a TP group's ring runs over. `group` names the symbol
    apart where one sheet prices several groups (two GPU types, two TP widths)."""
    symbol = _suffix("BW_link", group)
    if not crosses_domain(gpu, tp) and gpu.get("mesh_links") and tp - 1 < gpu.mesh_links:
        # A mesh has no switch: a group narrower than the domain reaches its members over its own links only.
        per_link = gpu.nvlink_gb_s * 1e9 / 2 / gpu.mesh_links
        links = "link" if tp == 2 else "links"
        # Named by the group's width: a sheet that prices several widths has a link for each.
        return s.given(_suffix(f"BW_link{tp}", group), per_link * (tp - 1), "GB/s",
                       f"{gpu.name} {fabric_name(gpu)} each direction over the {tp - 1} direct {links} among the "
                       f"group's GPUs ({gpu.mesh_links} a GPU, {per_link / 1e9:g} GB/s each way)")
    if not crosses_domain(gpu, tp):
        return given_nvlink(s, gpu, symbol)
    if nic is None:
        raise Reject(f"TP {tp} leaves the {gpu.name} {fabric_name(gpu)} domain and the variant names no NIC")
    return s.given(symbol, nic.gbit_s * 1e9 / 8, "GB/s",
                   f"{nic.name} per GPU, each direction: TP {tp} leaves the {scale_up_domain(gpu)}-GPU "
                   f"{fabric_name(gpu)} domain")


def link_latency(s: Sheet, gpu: Record, tp: int, group: str = "") -> sympy.Symbol:
    """The card's fixed latency of one all-reduce, inside the domain or across nodes."""
    symbol = _suffix("α", group)
    if not crosses_domain(gpu, tp):
        return s.given(symbol, convention_value("all-reduce-latency-nvlink") * 1e-6, "us",
                       f"latency of one all-reduce in the {fabric_name(gpu)} domain")
    return s.given(symbol, convention_value("all-reduce-latency-nic") * 1e-6, "us",
                   "latency of one all-reduce across nodes")


@dataclass(frozen=True)
class AllReduceTerms:
    """A step's TP all-reduces as fixed + per_token × tokens (both 0 at TP 1)."""

    fixed: sympy.Expr  # seconds per step whatever it carries: the calls' latencies
    per_token: sympy.Expr  # seconds per token the step carries: its activations over the ring

    def of(self, tokens: sympy.Expr) -> sympy.Expr:
        return self.fixed + self.per_token * tokens


def all_reduce_terms(s: Sheet, model: Record, gpu: Record, tp: int, *, nic: Record | None = None,
                     latency: sympy.Symbol | None = None, group: str = "",
                     tp_symbol: sympy.Expr | None = None) -> AllReduceTerms:
    """The card's model, said once: two all-reduces per layer, each a latency plus 2(TP−1)/TP of
    each token's activations over the link. latency: a question that draws its own per-call
    latency passes that symbol instead of the card's; group: a name for this link's givens where a
    sheet prices two GPUs; tp_symbol: the group's width as the sheet already states it (a layout
    among several), instead of the given TP."""
    if tp == 1:
        return AllReduceTerms(sympy.Integer(0), sympy.Integer(0))
    convention("tp-all-reduce")  # the card this model is: read so that the question lists it in play
    bandwidth = link_bandwidth(s, gpu, tp, nic, group)
    alpha = link_latency(s, gpu, tp, group) if latency is None else latency
    n = tp_symbol if tp_symbol is not None else s.given("TP", tp, "GPUs", "GPUs in the tensor-parallel group")
    L = given_config(s, model, "layers")
    h = given_config(s, model, "hidden")
    b_a = s.given("b_a", ACTIVATION_BYTES, "B", "bytes per activation (bf16)")
    return AllReduceTerms(2 * L * alpha, 2 * L * 2 * (n - 1) / n * h * b_a / bandwidth)


def tp_all_reduce(s: Sheet, model: Record, gpu: Record, tp: int, tokens: sympy.Expr, *, tag: str, label: str,
                  key: str = "", nic: Record | None = None, latency: sympy.Symbol | None = None,
                  group: str = "", where: str = "", tp_symbol: sympy.Expr | None = None) -> sympy.Expr:
    """Time of a forward pass's TP all-reduces for `tokens` tokens, as a step (0 at TP 1, where there
    are none). where: the link's name where the ring leaves the domain over something else than a NIC;
    tp_symbol: the group's width as the sheet already states it (all_reduce_terms)."""
    if tp == 1:
        return sympy.Integer(0)
    terms = all_reduce_terms(s, model, gpu, tp, nic=nic, latency=latency, group=group, tp_symbol=tp_symbol)
    where = fabric_name(gpu) if not crosses_domain(gpu, tp) else where or "the NIC"
    return s.step(key or f"allreduce_{tag}", f"TP all-reduces of the {label}", f"t_AR_{tag}", terms.of(tokens), "ms",
                  f"two per layer, each a latency plus 2(TP−1)/TP of the {label}'s activations over {where}")


def stage_send(s: Sheet, model: Record, gpu: Record, span: int, *, nic: Record | None = None) -> sympy.Symbol:
    """Time one request's token adds at one pipeline-stage boundary: its hidden state, in bf16, over the
    link between the stages. The stages share the link a ring over all `span` GPUs would use: NVLink while
    they fit the domain, the NIC once they span nodes. The send's latency (microseconds, against the
    milliseconds of a step's all-reduces) is left out."""
    link = link_bandwidth(s, gpu, span, nic)
    h = given_config(s, model, "hidden")
    b_a = s.given("b_a", ACTIVATION_BYTES, "B", "bytes per activation (bf16)")
    where = "the NIC" if crosses_domain(gpu, span) else fabric_name(gpu)
    return s.step("pp_send", "Stage-to-stage send per request", "x_PP", h * b_a / link, "us",
                  f"one token's hidden state over {where} at each of the S − 1 boundaries")

