"""Realism: draws a real system could have. A question declares named constraints over its
parameters (`constraints: {prefix_shorter: "prefix < context"}`), and bank-wide rules apply to
every question whose parameters they name (a `context` beside a `model`, a `tp` beside a
`gpu`). The sampler redraws until all hold; an override that breaks one is refused with the
rule's reason; `validate` reports each rule's rejection rate. A question whose point is to
break a rule turns it off by name (`constraints: {weights-fit: false}`).

Declared constraints are expressions read by a small interpreter over a whitelist of Python
syntax (comparisons, arithmetic, and/or/not, parameter names, record fields such as
model.max_context, min/max/abs/bytes): question files are data, never run as code.
"""
from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from solvers.conventions import convention_value, scale_up_domain
from solvers.data import MissingField, hbm_bytes
from solvers.dtypes import DTYPE_BYTES


class ConstraintError(ValueError):
    """A declared constraint that is not an expression this interpreter reads."""


@dataclass(frozen=True)
class Constraint:
    name: str
    says: str  # the rule in words (or the declared expression)
    check: Callable[[Mapping[str, Any]], str | None]  # why these values break it, or None


_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_COMPARE = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
            ast.Eq: operator.eq, ast.NotEq: operator.ne}
def kv_bytes(model: Mapping[str, Any], dtype: str) -> float:
    """KV cache bytes per token of a model in a dtype, as solvers.formulas.kvcache states it: a key and a value
    per KV head in every layer, or MLA's one latent plus its RoPE key per layer."""
    layers = model.get("attention_layers", model["layers"])  # a hybrid's Mamba layers keep no KV
    if model.get("attention") == "mla":
        return layers * (model["kv_lora_rank"] + model["qk_rope_head_dim"]) * DTYPE_BYTES[dtype]
    return 2 * layers * model["kv_heads"] * model["head_dim"] * DTYPE_BYTES[dtype]


def weight_bytes(model: Mapping[str, Any], dtype: str) -> float:
    """Bytes of a model's weights, every one in the dtype."""
    return model["params_b"] * 1e9 * DTYPE_BYTES[dtype]


# What a constraint may call: arithmetic, and the bank's own facts, so that no file types them again.
_FUNCTIONS: dict[str, Callable[..., Any]] = {"min": min, "max": max, "abs": abs, "ceil": math.ceil,
                                             "floor": math.floor, "log2": math.log2,
                                             "bytes": lambda dtype: DTYPE_BYTES[dtype],
                                             "hbm": hbm_bytes,  # a GPU's HBM in bytes, as the solvers size it
                                             "kv_bytes": kv_bytes, "weight_bytes": weight_bytes}
# The conventions a constraint may name, read from their cards when a constraint is checked (usable_hbm: the
# share of HBM an engine budgets; tp_width: the least share of HBM a GPU's weights take under TP; minimal_kv_pool:
# the least share the weights leave for KV).
_CONSTANTS: dict[str, Callable[[], float]] = {"usable_hbm": lambda: convention_value("usable-hbm"),
                                              "tp_width": lambda: convention_value("tp-width"),
                                              "minimal_kv_pool": lambda: convention_value("minimal-kv-pool")}


def _evaluate(node: ast.AST, values: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body, values)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str)):
        return node.value
    if isinstance(node, ast.Name):
        return values[node.id] if node.id in values else _CONSTANTS[node.id]()
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        record = values[node.value.id]
        if node.attr not in record:  # a user's entry without the field: say whose, as a solver's read would
            raise MissingField(f"{record.get('name', node.value.id)} has no {node.attr}")
        return record[node.attr]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _arithmetic(type(node.op), _evaluate(node.left, values), _evaluate(node.right, values))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Not)):
        operand = _evaluate(node.operand, values)
        return -operand if isinstance(node.op, ast.USub) else not operand
    if isinstance(node, ast.BoolOp):
        results = (_evaluate(v, values) for v in node.values)
        return all(results) if isinstance(node.op, ast.And) else any(results)
    if isinstance(node, ast.Compare):
        left = _evaluate(node.left, values)
        for op, right_node in zip(node.ops, node.comparators):
            right = _evaluate(right_node, values)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        return _FUNCTIONS[node.func.id](*(_evaluate(a, values) for a in node.args))
    raise ConstraintError(f"'{ast.unparse(node)}' is not allowed in a constraint")


MAX_BITS = 4096  # a whole number in a constraint past this is no parameter's: refused, not computed
MAX_DEPTH = 200  # operations nested in one constraint; the interpreter recurses once a level


def _arithmetic(op: type[ast.operator], left: Any, right: Any) -> Any:
    """One operation, on numbers only and bounded in time and memory: `'x' * 10 ** 10` is refused,
    a power is taken in floats (`9 ** 9 ** 9` in whole numbers would run for minutes) and a whole
    number past MAX_BITS is an OverflowError, which rules the draw out as any failed check does."""
    if not all(isinstance(x, (int, float)) for x in (left, right)):
        raise TypeError(f"arithmetic on {type(left).__name__} and {type(right).__name__}")
    if op is ast.Pow:
        left = float(left)
    result = _BINARY[op](left, right)
    if isinstance(result, int) and result.bit_length() > MAX_BITS:
        raise OverflowError(f"a whole number of over {MAX_BITS} bits")
    return result


def _depth(node: ast.AST) -> int:
    deepest, stack = 0, [(node, 1)]
    while stack:
        current, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(current))
    return deepest


def _check_syntax(node: ast.AST, names: set[str]) -> None:
    if _depth(node) > MAX_DEPTH:
        raise ConstraintError(f"nested over {MAX_DEPTH} operations deep")
    for child in ast.walk(node):
        if isinstance(child, ast.Call) and not (isinstance(child.func, ast.Name) and child.func.id in _FUNCTIONS):
            raise ConstraintError(f"'{ast.unparse(child)}': only {', '.join(_FUNCTIONS)} may be called")
        if isinstance(child, ast.Attribute) and (not isinstance(child.value, ast.Name) or child.attr.startswith("_")):
            raise ConstraintError(f"'{ast.unparse(child)}': a field of a parameter only (model.max_context)")
        if isinstance(child, ast.Name) and child.id not in names and child.id not in _FUNCTIONS | _CONSTANTS:
            raise ConstraintError(f"'{child.id}' names no parameter")
        allowed = (ast.Expression, ast.Constant, ast.Name, ast.Attribute, ast.BinOp, ast.UnaryOp, ast.BoolOp,
                   ast.Compare, ast.Call, ast.Load, ast.And, ast.Or, ast.Not, ast.USub, *_BINARY, *_COMPARE)
        if not isinstance(child, allowed):
            raise ConstraintError(f"'{ast.unparse(child)}' is not allowed in a constraint")


def expression(constraint: Constraint) -> ast.Expression | None:
    """A declared constraint's parsed expression (None for a bank rule, said in words)."""
    return constraint.check.tree if isinstance(constraint.check, _Declared) else None


def declared(name: str, text: str, parameters: set[str]) -> Constraint:
    """A question's own constraint; raises ConstraintError for text it cannot read."""
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as error:
        raise ConstraintError(f"not an expression: {error.msg}") from None
    except (RecursionError, MemoryError):  # the parser's own limit, on thousands of terms
        raise ConstraintError(f"nested over {MAX_DEPTH} operations deep") from None
    _check_syntax(tree, parameters)
    return Constraint(name, text, _Declared(name, text, tree))


@dataclass(frozen=True)
class _Declared:
    """A declared constraint's check: a value (not a closure) so that a parsed question can be cached."""
    name: str
    text: str
    tree: ast.Expression

    def __call__(self, values: Mapping[str, Any]) -> str | None:
        return None if _evaluate(self.tree, values) else f"{self.name}: {self.text} fails"


# Bank-wide rules ---------------------------------------------------------------------------------
def _records(values: Mapping[str, Any], field: str) -> list[Mapping[str, Any]]:
    return [v for v in values.values() if isinstance(v, Mapping) and field in v]


def _context_within_model(values: Mapping[str, Any]) -> str | None:
    for name in ("context", "prompt"):
        length = values.get(name)
        for model in _records(values, "max_context"):
            if isinstance(length, (int, float)) and length > model["max_context"]:
                return f"{model['name']} serves at most {model['max_context']:,} tokens ({name} {length:,.0f})"
    return None


def _reply_within_model(values: Mapping[str, Any]) -> str | None:
    prompt, reply = values["prompt"], values.get("reply", values.get("output"))
    for model in _records(values, "max_context"):
        if isinstance(reply, (int, float)) and prompt + reply > model["max_context"]:
            return (f"{model['name']} serves at most {model['max_context']:,} tokens (a {prompt:,.0f}-token prompt "
                    f"and a {reply:,.0f}-token reply)")
    return None


def _tp_within_scale_up(values: Mapping[str, Any]) -> str | None:
    gpu = values.get("gpu")
    domain = scale_up_domain(gpu if isinstance(gpu, Mapping) else None)
    return None if values["tp"] <= domain else f"TP {values['tp']} is wider than a {domain:.0f}-GPU NVLink domain"


def _weights(values: Mapping[str, Any], share: int) -> tuple[str, float]:
    """(weight dtype, bytes of the model's weights each of `share` GPUs holds)."""
    dtype = values.get("weight_dtype", values.get("dtype", "bf16"))
    return dtype, values["model"]["params_b"] * 1e9 * DTYPE_BYTES.get(dtype, 2) / share


def _weights_fit(values: Mapping[str, Any]) -> str | None:
    model, gpu = values["model"], values["gpu"]
    share = values.get("tp", values.get("gpus", 1))
    dtype, per_gpu = _weights(values, share)
    room = (convention_value("usable-hbm") - convention_value("minimal-kv-pool")) * hbm_bytes(gpu)
    if per_gpu <= room:
        return None
    return (f"{model['name']} in {dtype} over {share} GPU(s) needs {per_gpu / 1e9:.0f} GB of weights per "
            f"{gpu['name']}, past the {room / 1e9:.0f} GB that leaves room for a KV pool")


def _tp_suits_model(values: Mapping[str, Any]) -> str | None:
    model, gpu, tp = values["model"], values["gpu"], values["tp"]
    _, per_gpu = _weights(values, tp)
    least = convention_value("tp-width") * hbm_bytes(gpu)
    if tp == 1 or per_gpu >= least:
        return None
    return (f"TP {tp} leaves {per_gpu / 1e9:.1f} GB of {model['name']} per {gpu['name']}: a model that size "
            "is not split that wide")


def _slo_scales_with_work(values: Mapping[str, Any]) -> str | None:
    model, gpu, prompt, ttft = values["model"], values["gpu"], values["prompt"], values["ttft"]
    floor = 2 * model["params_b"] * 1e9 * prompt / (values.get("tp", 1) * gpu["bf16_dense_tflops"] * 1e12)
    if ttft >= floor:
        return None
    return (f"a {ttft:g} s TTFT target for a {prompt:,.0f}-token prompt, which takes {floor:.2g} s of compute "
            "at peak on its GPUs alone")


def _prefix_shorter(values: Mapping[str, Any]) -> str | None:
    ok = values["prefix"] < values["context"]
    return None if ok else f"the shared prefix ({values['prefix']:,}) is not shorter than the sequence"


def _microbatches_cover_stages(values: Mapping[str, Any]) -> str | None:
    ok = values["microbatches"] >= values["pp"]
    return None if ok else f"{values['microbatches']} micro-batches for {values['pp']} pipeline stages"


@dataclass(frozen=True)
class _Rule:
    name: str
    says: str
    needs: tuple[tuple[str, ...], ...]  # for the rule to apply, a question has one name of each tuple
    check: Callable[[Mapping[str, Any]], str | None]


BANK_RULES = (
    _Rule("context-within-model", "a context no longer than the model serves (its max_context)",
          (("model",), ("context", "prompt")), _context_within_model),
    # An engine refuses a request whose prompt and max_tokens pass the model's context (vLLM's max_model_len).
    _Rule("reply-within-model", "a prompt and its reply no longer together than the model serves",
          (("model",), ("prompt",), ("reply", "output")), _reply_within_model),
    _Rule("tp-within-scale-up", "tensor parallelism within one scale-up domain (the conventions card)",
          (("tp",),), _tp_within_scale_up),
    # Only where the draw says how the weights are stored and spread: a question that treats one GPU
    # as streaming all of them, or a training fleet, states no serving layout.
    _Rule("weights-fit", "the weights' share per GPU fits beside a minimal KV pool",
          (("model",), ("gpu",), ("tp", "gpus"), ("weight_dtype", "dtype")), _weights_fit),
    _Rule("tp-suits-model", "no wider tensor parallelism than a model of that size is served with",
          (("model",), ("gpu",), ("tp",), ("weight_dtype", "dtype")), _tp_suits_model),
    _Rule("slo-scales-with-work", "a TTFT target no shorter than the prompt's own prefill at peak compute",
          (("model",), ("gpu",), ("prompt",), ("ttft",)), _slo_scales_with_work),
    _Rule("prefix-shorter", "a shared prefix shorter than the sequences that start with it",
          (("prefix",), ("context",)), _prefix_shorter),
    _Rule("microbatches-cover-stages", "at least as many micro-batches as pipeline stages",
          (("microbatches",), ("pp",)), _microbatches_cover_stages),
)
RULE_NAMES = frozenset(rule.name for rule in BANK_RULES)


def constraints_for(parameters: set[str], declared_constraints: tuple[Constraint, ...],
                    off: frozenset[str]) -> tuple[Constraint, ...]:
    """The bank rules a question's parameters bring in (less those it turns off), then its own."""
    rules = tuple(Constraint(r.name, r.says, r.check) for r in BANK_RULES
                  if all(set(names) & parameters for names in r.needs) and r.name not in off)
    return rules + declared_constraints


def broken(constraints: tuple[Constraint, ...], values: Mapping[str, Any]) -> str | None:
    """Why these values break the first constraint they break ('rule: reason'), or None."""
    for constraint in constraints:
        try:
            reason = constraint.check(values)
        except MissingField as missing:  # an entry the question cannot use: what the solver's refusal says
            return f"cannot use this entry: {missing}"
        except (KeyError, TypeError, ArithmeticError, ValueError) as error:
            reason = f"cannot be decided ({type(error).__name__}: {error})"  # rules the draw out
        if reason is not None:
            return f"{constraint.name}: {reason}" if not reason.startswith(f"{constraint.name}:") else reason
    return None
