"""`solve --json`: every quantity is {value, unit} in display units with si in base units."""
from __future__ import annotations

import pytest

from solvers.engine import VariantCode, make_variant
from solvers.parse import parse_quantity
from solvers.report import JSON_SCHEMA, to_dict
from solvers.units import parse_unit


def _quantities(data):
    for section in ("answers", "givens", "steps"):
        for item in data[section]:
            if "si" in item:
                yield item
    if data["regime"]:
        yield data["regime"]["boundary"]
        yield data["regime"]["position"]


@pytest.mark.parametrize("qid", ["kv-bytes-per-token", "weight-read-intensity", "training-compute-budget",
                                 "slo-goodput", "nic-bandwidth-per-gpu", "paged-block-size"])
def test_a_consumer_reading_value_and_unit_gets_the_quantity(bank, catalog, qid):
    data = to_dict(make_variant(bank, catalog, VariantCode(qid, 11)))
    assert data["schema"] == JSON_SCHEMA
    seen = 0
    for item in _quantities(data):
        seen += 1
        assert parse_unit(item["unit"]).to_base(item["value"]) == pytest.approx(item["si"], rel=1e-12)
        shown = item.get("result") or item.get("shown")
        if shown and "×10^" not in shown or shown and item["unit"] not in ("", "%"):
            # What the app prints parses back to the same quantity, to its 4 figures.
            typed = parse_quantity(shown)
            base = typed.value if typed.unit is not None else parse_unit(item["unit"]).to_base(typed.value)
            assert base == pytest.approx(item["si"], rel=1e-3, abs=1e-12), (item, shown)
    assert seen > 5
    numeric = [a for a in data["answers"] if a["kind"] in ("number", "estimate")]
    assert numeric and all({"value", "unit", "si"} <= set(a) for a in numeric)
