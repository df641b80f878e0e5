"""Terms: how keyword recall splits text into the units it matches.

Text is case-folded and split into words of letters and digits. A word joined to
the next by ``-``, ``_``, ``.``, ``:``, ``/`` or ``@`` with no space between forms an
identifier (``ERR-4021``, ``node-7``, ``inc-101``, ``eu-west.db``), which is a term
of its own **and** gives its parts as terms, so ``ERR-4021`` matches ``err-4021``
exactly and ``4021`` too. Plain words are stemmed with the Snowball English stemmer
(``painted``, ``painting`` -> ``paint``); identifiers and words with digits are kept
as written. Common English words (``the``, ``did``, ``what``...) are no terms at all:
they would match nearly everything and cost the most.

>>> terms("Did ERR-4021 stop the painting?")
['err-4021', 'err', '4021', 'stop', 'paint']
"""

from __future__ import annotations

import functools
import re
import string
import unicodedata

import Stemmer

__all__ = ["ANALYZER", "STOP_WORDS", "count_terms", "forget_stems", "term_counts", "terms"]

_TOKEN = re.compile(r"[^\W_]+(?:[-_.:/@][^\W_]+)*")
_PART = re.compile(r"[^\W_]+")
# ASCII punctuation: no token starts or ends with any of it (``_`` is a word character,
# but the pattern takes it only as a joiner, as it takes ``-``).
_PUNCTUATION = string.punctuation
_stemmer = Stemmer.Stemmer("english")

#: Words that are never terms: pronouns, articles, auxiliaries, prepositions.
STOP_WORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing don down during each few for
    from further had has have having he her here hers herself him himself his how i if in into
    is it its itself just me more most my myself no nor not now of off on once only or other
    ought our ours ourselves out over own same she should so some such than that the their
    theirs them themselves then there these they this those through to too under until up very
    was we were what when where which while who whom why will with would you your yours
    yourself yourselves s t d ll m re ve""".split()
)

#: What a text's terms depend on besides a text: this module's rules (the number, bumped
#: with any change of them), the stemmer's release and Python's Unicode tables (case
#: folding, which characters are letters). A search index saved beside a view holds its
#: items' terms (`folders.index_snapshots`): one saved where any of these differed would
#: miss the words whose terms changed, so snapshots are named by this, and each kind of
#: reader loads only its own.
ANALYZER = f"terms 1; PyStemmer {Stemmer.version()} english; Unicode {unicodedata.unidata_version}"


def terms(text: str) -> list[str]:
    """The terms of a text, in order, repeats kept."""
    out: list[str] = []
    stems, stop_words = _STEMS, STOP_WORDS
    # Split at whitespace first (no term holds any) and run the token pattern only over
    # the pieces that are not one plain word: most pieces are a word, or a word with
    # ASCII punctuation around it, and splitting so took about two thirds of the time
    # of running the pattern over the whole text.
    for piece in text.casefold().split():
        if not piece.isalnum():
            # Stripped of the punctuation at its ends, a piece that is letters and
            # digits is exactly the one token the pattern would find in it.
            bare = piece.strip(_PUNCTUATION)
            if not bare.isalnum():
                for token in _TOKEN.findall(piece):
                    if token.isalnum():
                        if token not in stop_words:
                            stem = stems.get(token)
                            out.append(stem if stem is not None else _word(token))
                        continue
                    joined = _JOINED.get(token)
                    if joined is None:
                        joined = _joined(token)
                    out.extend(joined)
                continue
            piece = bare
        if piece not in stop_words:
            stem = stems.get(piece)
            out.append(stem if stem is not None else _word(piece))
    return out


def _joined(token: str) -> tuple[str, ...]:
    """The terms of a token that is not one plain word (an identifier such as
    ``node-7``: itself, then its parts), kept for the next time it is met: identifiers
    repeat, and splitting and stemming one again was a fifth of splitting a text."""
    parts = _PART.findall(token)
    if len(parts) > 1:
        joined = (token, *(_word(part) for part in parts if part not in STOP_WORDS))
    elif token not in STOP_WORDS:
        joined = (_word(token),)
    else:
        joined = ()
    if len(_JOINED) >= _MAX_JOINED:
        _JOINED.clear()
    _JOINED[token] = joined
    return joined


#: Words already stemmed (a vocabulary is far smaller than the text it makes): stemming
#: was most of the cost of splitting text into terms. Bounded by clearing. Every term
#: comes from here or `_JOINED`, so a term held by a million items is one string while
#: it stays here (interning each occurrence cost a tenth of counting a body's terms).
_STEMS: dict[str, str] = {}
_MAX_STEMS = 1 << 18
#: Tokens that are not one plain word, and their terms (`_joined`). Bounded by clearing.
_JOINED: dict[str, tuple[str, ...]] = {}
_MAX_JOINED = 1 << 14  # a few MB at most: the stems are most of what a text repeats


def forget_stems() -> None:
    """Empty the stem cache. A search index's build fills it with the words of every body
    it reads; a reader that saved the index and loads it back empties it, so the build's
    word strings (and the heap pages they hold) do not outlive the build."""
    _STEMS.clear()
    _JOINED.clear()


def _word(word: str) -> str:
    stem = _STEMS.get(word)
    if stem is None:
        stem = _stemmer.stemWord(word) if word.isalpha() else word
        if len(_STEMS) >= _MAX_STEMS:
            _STEMS.clear()
        _STEMS[word] = stem
    return stem


def count_terms(body: bytes) -> tuple[dict[str, int], int]:
    """How often each term occurs in a record body, and the body's length in terms
    (`term_counts` without its cache: for a search index, which meets each body once
    and keeps what it needs of it)."""
    counts: dict[str, int] = {}
    found = terms(body.decode("utf-8", "replace"))
    # The terms come from the caches (`_STEMS`, `_JOINED`): a term held by a million
    # items is one string, not a million.
    for term in found:
        counts[term] = counts.get(term, 0) + 1
    return counts, len(found)


@functools.lru_cache(maxsize=1 << 15)
def term_counts(body: bytes) -> tuple[dict[str, int], int]:
    """`count_terms`, cached: a scan (an owner-filtered hybrid recall) scores the same
    bodies again and again, and they never change. At most 32,768 bodies, about 12 MB: a
    cache of 131,072 held 50 MB of a reader's memory at 100k items. The result is shared:
    never change it."""
    return count_terms(body)
