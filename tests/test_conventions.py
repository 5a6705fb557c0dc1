"""The conventions card: which cards a text names."""
from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from solvers.conventions import conventions, named_cards

IDS = [c.id for c in conventions()]


def _named_by_search(text: str) -> list[str]:
    """The definition named_cards keeps: an id that stands as a word, with no word character or hyphen beside it."""
    return [i for i in IDS if re.search(rf"(?<![\w-]){re.escape(i)}(?![\w-])", text)]


@given(st.lists(st.one_of(st.sampled_from(IDS), st.sampled_from(["-", " ", "'s", "x", "é", ".", "(", "_", "\n"])),
                max_size=12))
def test_a_card_is_named_where_it_stands_as_a_word_and_not_inside_a_longer_one(pieces):
    text = "".join(pieces)
    assert named_cards(text) == _named_by_search(text)


def test_named_cards_keep_the_card_s_order():
    first, second = IDS[0], IDS[1]
    assert named_cards(f"{second}, then {first}.") == [first, second]
    assert named_cards(f"{first}-x and x{second}") == []
