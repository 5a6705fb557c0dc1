"""Browse's filter: what a typed query keeps."""
from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from solvers.groups import group_names
from solvers.lookup import matching


@dataclass(frozen=True)
class Q:
    id: str
    title: str
    group: str
    topic: str


BANK = [Q("moe-dispatch-bytes", "Bytes an MoE dispatch sends", "M", "moe"),
        Q("kv-bytes-per-token", "KV cache bytes per token", "F", "memory"),
        Q("paged-block-size", "Choosing the KV block size", "K1", "kv-cache"),
        Q("ep-load-skew", "Expert load skew", "M", "moe")]


def test_words_narrow_by_id_title_topic_and_group():
    assert matching(BANK, "") == [q.id for q in BANK]
    assert matching(BANK, "moe") == ["moe-dispatch-bytes", "ep-load-skew"]  # id, title or topic
    assert matching(BANK, "BYTES token") == ["kv-bytes-per-token"]  # every word, case aside
    assert matching(BANK, "skew") == ["ep-load-skew"]
    assert matching(BANK, "nothing-like-it") == []


def test_a_group_code_as_a_word_means_that_group_and_its_name_matches_too():
    assert matching(BANK, "m") == ["moe-dispatch-bytes", "ep-load-skew"]  # not every title with an m
    assert matching(BANK, "k1") == ["paged-block-size"]
    assert matching(BANK, "m bytes") == ["moe-dispatch-bytes"]
    name_word = group_names()["F"].split()[0]  # the group's name, from groups.yaml
    assert "kv-bytes-per-token" in matching(BANK, name_word)


@given(st.text(alphabet="abcdekmpstuvy- ", max_size=12), st.text(alphabet="abcdekmpstuvy- ", max_size=12))
def test_more_words_never_widen_the_list(first, second):
    narrower = matching(BANK, f"{first} {second}")
    assert set(narrower) <= set(matching(BANK, first)) and set(narrower) <= set(matching(BANK, second))
