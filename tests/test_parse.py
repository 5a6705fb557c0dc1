"""The answer parser: what people type, what it must refuse, and round trips."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solvers.parse import ParseError, parse_quantity
from solvers.units import DIMENSIONLESS, UnitError, format_number, format_quantity, parse_unit


@pytest.mark.parametrize("text, value, unit", [
    ("320 GiB", 320 * 2**30, "GiB"),
    ("343.6GB", 343.6e9, "GB"),
    ("3.4e11", 3.4e11, None),
    ("40%", 0.4, "%"),
    ("1.2 ms", 1.2e-3, "ms"),
    ("6,200", 6200, None),
    ("2.4×10^25", 2.4e25, None),
    ("2.4 x 10^25", 2.4e25, None),
    ("2.4*10**25", 2.4e25, None),
    ("2.4×10²⁵", 2.4e25, None),
    ("~6200 GPUs", 6200, "GPUs"),
    ("1.5k", 1500, "k"),
    ("400 Gb/s", 50e9, "Gb/s"),
    ("400Gbps", 50e9, "Gbps"),
    ("989.4 TFLOP/s", 989.4e12, "TFLOP/s"),
    ("295 FLOP/B", 295, "FLOP/B"),
    ("43 days", 43 * 86400, "days"),
    ("14 MW", 14e6, "MW"),
    ("1,234,567.5 tokens/s", 1234567.5, "tokens/s"),
    ("400 billion params", 400e9, "billion params"),
    ("$8,738", 8738, "$"),
    ("$1.2M", 1.2e6, "$"),
    ("$8,738/GPU", 8738, "$/GPU"),
    ("−3", -3, None),
    (".5", 0.5, None),
    ("120 rps", 120, "rps"),  # rates as people write them
    ("35 qps", 35, "qps"),
    ("48 tok/s", 48, "tok/s"),
    ("7 /s", 7, "/s"),
    ("3 kib", 3 * 2**10, "kib"),  # lower-case binary sizes mean bytes
    ("1.5 gib", 1.5 * 2**30, "gib"),
    ("2.4 ZFLOP", 2.4e21, "ZFLOP"),
])
def test_accepts_what_people_type(text, value, unit):
    quantity = parse_quantity(text)
    assert quantity.value == pytest.approx(value, rel=1e-12)
    assert (quantity.unit.text if quantity.unit else None) == unit


@pytest.mark.parametrize("text", ["", "   ", "abc", "1,5", "12 parsecs", "__import__('os').system('true')",
                                  "1e999999", "2**10", "1 2", "1,23,456", "eval(1)", "0x10"])
def test_refuses_cleanly(text):
    with pytest.raises(ParseError):
        parse_quantity(text)


def test_never_evaluates(monkeypatch):
    calls = []
    monkeypatch.setattr("builtins.eval", lambda *a, **k: calls.append(a))
    monkeypatch.setattr("builtins.exec", lambda *a, **k: calls.append(a))
    for text in ["__import__('os')", "1+1", "2*3 GB"]:
        try:
            parse_quantity(text)
        except ParseError:
            pass
    assert calls == []


@settings(max_examples=500)
@given(st.text(max_size=40))
def test_any_text_gives_a_value_or_a_parse_error(text):
    try:
        quantity = parse_quantity(text)
    except ParseError:
        return
    assert isinstance(quantity.value, float)


finite = st.floats(min_value=1e-12, max_value=1e30, allow_nan=False, allow_infinity=False)


@settings(max_examples=500)
@given(finite, st.sampled_from(["", "GiB", "GB", "KiB", "ms", "s", "days", "TFLOP", "FLOP/B", "tokens/s", "%", "TB/s",
                                "$", "$/GPU", "$/h", "$/M tokens", "x", "epochs"]))
def test_formatted_values_parse_back(value, unit):
    text = format_quantity(value, unit)
    quantity = parse_quantity(text)
    back = quantity.value if quantity.unit is not None else parse_unit(unit).to_base(quantity.value)
    assert back == pytest.approx(value, rel=1e-3)


@given(st.floats(min_value=-1e30, max_value=1e30, allow_nan=False).filter(lambda v: v == 0 or abs(v) > 1e-12))
def test_format_number_round_trip(value):
    assert parse_quantity(format_number(value)).value == pytest.approx(value, rel=1e-3, abs=1e-12)


def test_units_have_dimensions():
    assert parse_unit("GiB").dim == parse_unit("B").dim
    assert parse_unit("Gb/s").scale == pytest.approx(1.25e8)
    assert parse_unit("FLOP/B").dim != parse_unit("FLOP").dim
    assert parse_unit("tokens").dim == DIMENSIONLESS
    assert parse_unit("min").scale == 60  # minutes, not milli-"in"
    with pytest.raises(UnitError):
        parse_unit("furlongs")


def test_format_number_is_readable():
    assert format_number(327680) == "327,680"
    assert format_number(42.1194) == "42.12"
    assert format_number(2.4e25) == "2.4×10^25"
    assert format_number(0.0421) == "0.0421"
    assert not math.isnan(parse_quantity(format_number(1e-5)).value)
    assert format_quantity(1, "slots") == "1 slot"
    assert format_quantity(2, "slots") == "2 slots"
    assert format_quantity(1, "drives") == "1 drive"
    assert format_quantity(86400, "days") == "1 day" and format_quantity(3600, "hours") == "1 hour"
    assert format_quantity(2 * 86400, "days") == "2 days"
    assert format_quantity(1, "requests/s") == "1 request/s"  # a rate's count noun too
    assert format_quantity(2, "requests/s") == "2 requests/s"
    assert format_quantity(1e9, "GB/s") == "1 GB/s"
    assert format_quantity(1.5, "x") == "1.5×"
