"""How a step's formula prints: as symbols ('I = F/W'), and with this variant's values put in.

A question's formulas are the same expressions in every variant; only the values change. So a
formula is printed once, with a marker where each symbol goes (a template), and each variant
fills the markers with its values. The filled template is exactly what printing the formula
with the values would give (a test holds the two equal over the bank), save where sympy's
printer would read a value itself: a term printed with a leading minus turns '+' into '-'. A
value that starts with one, or that tidying would change, is printed the long way.
"""
from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

import sympy
from sympy.printing.str import StrPrinter

_FUNCTION_NAMES = (("Max(", "max("), ("Min(", "min("), ("ceiling(", "ceil("), ("sqrt(", "√("))
_MARK = "\x00"  # around a symbol's number in a template; never in a formula's own text


def tidy(text: str) -> str:
    """sympy's text as the sheet shows it: ^ for powers, · for products, max/min/ceil/√."""
    text = text.replace("**", "^").replace("*", "·")
    for old, new in _FUNCTION_NAMES:
        text = text.replace(old, new)
    return text


class _Printer(StrPrinter):
    """sympy's text, a sum said as a person says it: its added terms first, what it takes away after
    (R − F, not −F + R; 82.83 us − 6.554 us, not −6.554 us + 82.83 us)."""

    def _as_ordered_terms(self, expr, order=None):
        terms = super()._as_ordered_terms(expr, order=order)
        return sorted(terms, key=lambda term: term.could_extract_minus_sign())  # stable: sympy's order within each


@lru_cache(maxsize=8192)
def formula(expr: sympy.Basic) -> str:
    return tidy(_Printer().doprint(expr))


@lru_cache(maxsize=8192)
def latex(expr: sympy.Basic) -> str:
    return sympy.latex(expr)


def substituted(expr: sympy.Basic, shown: Mapping[sympy.Symbol, str]) -> str:
    """The formula with every symbol printed as its value in `shown` (its name where it has none),
    keeping exactly the structure and order of the symbolic form."""
    texts, symbols = _template(expr)
    values = [shown.get(symbol, symbol.name) for symbol in symbols]
    if any(not value or value[0] == "-" or tidy(value) != value for value in values):
        return tidy(_ValuePrinter(shown).doprint(expr))
    filled = [texts[0]]
    for value, text in zip(values, texts[1:], strict=True):
        filled += (value, text)
    return "".join(filled)


@lru_cache(maxsize=8192)
def _template(expr: sympy.Basic) -> tuple[tuple[str, ...], tuple[sympy.Symbol, ...]]:
    """The tidied text of `expr` between its symbols, and the symbols in the order they print."""
    printer = _MarkingPrinter()
    pieces = tidy(printer.doprint(expr)).split(_MARK)
    return tuple(pieces[0::2]), tuple(printer.symbols[int(index)] for index in pieces[1::2])


class _ValuePrinter(_Printer):
    """Prints known symbols as their values (with units) so the substituted form keeps
    exactly the structure and order of the symbolic one."""

    def __init__(self, shown: Mapping[sympy.Symbol, str]):
        super().__init__()
        self._shown = shown

    def _print_Symbol(self, expr):
        return self._shown.get(expr, expr.name)


class _MarkingPrinter(_Printer):
    """Prints each symbol as a numbered marker, remembering which symbol each number stands for."""

    def __init__(self) -> None:
        super().__init__()
        self.symbols: list[sympy.Symbol] = []

    def _print_Symbol(self, expr):
        self.symbols.append(expr)
        return f"{_MARK}{len(self.symbols) - 1}{_MARK}"
