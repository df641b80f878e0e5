"""Splitting text into terms: the caches behind `terms` never change what it gives."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

import laser_memory.terms as terms_module
from laser_memory.terms import STOP_WORDS, count_terms, forget_stems, terms

_TOKEN = re.compile(r"[^\W_]+(?:[-_.:/@][^\W_]+)*")
_PART = re.compile(r"[^\W_]+")


def _plain_terms(text: str) -> list[str]:
    """The rules of `laser_memory.terms`, written out with no cache."""
    import Stemmer

    stemmer = Stemmer.Stemmer("english")

    def word(w: str) -> str:
        return stemmer.stemWord(w) if w.isalpha() else w

    out: list[str] = []
    for token in _TOKEN.findall(text.casefold()):
        parts = _PART.findall(token)
        if len(parts) > 1:
            out.append(token)
            out.extend(word(part) for part in parts if part not in STOP_WORDS)
        elif token not in STOP_WORDS:
            out.append(word(token))
    return out


_PIECES = st.sampled_from(
    ["node", "7", "ERR", "4021", "the", "did", "painting", "Painted", "eu", "west", "db",
     "a", "s", "Ünïcode", "ǅemal", "x\u0301", "٣", "_", "__", "-", ".", ":", "/", "@", " ",
     "\n", "-the-", "adopted", "what", "!", ",", "'", "(", ")", "?", "#", '"', "\t",
     "\u00a0", "\u2003", "\x1c", "\u2028", "…", "«"]
)  # fmt: skip


@settings(max_examples=300)
@given(st.lists(st.lists(_PIECES, max_size=12).map("".join), min_size=1, max_size=6))
def test_terms_are_the_rules_written_out_with_the_caches_cold_warm_and_cleared(texts):
    forget_stems()
    for text in texts:  # cold: each token met for the first time here, or warm
        assert terms(text) == _plain_terms(text)
    for text in texts:
        assert terms(text) == _plain_terms(text)
    # Caches of one or two entries, cleared at nearly every token met.
    saved = terms_module._MAX_STEMS, terms_module._MAX_JOINED
    terms_module._MAX_STEMS, terms_module._MAX_JOINED = 2, 1
    try:
        for text in texts:
            assert terms(text) == _plain_terms(text)
    finally:
        terms_module._MAX_STEMS, terms_module._MAX_JOINED = saved
        forget_stems()


def test_a_term_many_bodies_hold_is_one_string():
    # An index of a million items holds each term's string once (interning did this
    # before the caches handed out one string for every occurrence).
    forget_stems()
    first, _ = count_terms(b"ERR-4021 on node-7: painting again")
    second, _ = count_terms(b"Node-7 raised err-4021 while PAINTING")
    for term in ("err-4021", "node-7", "paint", "err", "4021", "node", "7"):
        [a] = [k for k in first if k == term]
        [b] = [k for k in second if k == term]
        assert a is b, term
