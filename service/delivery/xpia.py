"""XPIA envelopes: how untrusted message text is fenced off before a model reads it.

Tool results carry ``<external_content sender="…" source="teams|email">…</external_content>``;
channel pushes, which may not contain angle brackets, carry ``[external_content …]…[/external_content]``.
The host's prompt tells the model that whatever sits inside an envelope is data, not instructions, so
the whole defence rests on one property: text from outside can never close the envelope early nor open
a fake one. Rather than enumerate every closing variant (case, spacing, entities, look-alike brackets…),
every occurrence of the envelope's *word* in attacker-controlled text is replaced, whatever form it
takes; without the word no marker can be forged, whichever brackets surround it.

"Whatever form" is decided on a detection view of the text: HTML entities and %-escapes decoded (up to
three levels, as a renderer or the model might), tags and comments read as separators, each character
NFKD-decomposed and folded to its Unicode confusables skeleton (UTS #39, through ``disarm``), so that
Cyrillic "е", "ø", "ł", "🅰" or "0" read as the Latin letters they look like. The word is then found with any run of non-alphanumeric characters (spaces, ``_``, zero-width
and format characters, combining marks…) between its letters. Detection never alters the text a reader
sees, except for the replaced spans; bidi overrides are dropped so text displays in its reading order.

Chains across an envelope boundary are ruled out by layout: every attacker-controlled value is followed
by a fixed word (``source``, ``teams``/``email``, ``message truncated``) none of whose letters can
continue the envelope word, the fixed words before a value end in letters that cannot start it, and a
sender name holds nothing that decodes into markup able to hide those words. The tests prove all this
on an adversarial corpus and with property tests over random text mixed with attack fragments.
"""

from __future__ import annotations

import html
import re
import unicodedata
import urllib.parse
from collections.abc import Callable, Iterator
from functools import lru_cache

from disarm import skeleton_key

from service.domain.source import Source

ENVELOPE_WORD = "external_content"
# What a forged envelope word becomes: plain words with no letter that reads as "x", so it can never be
# (part of) the word itself — which is what makes neutralise() end.
DEFANGED_WORD = "(envelope tag removed)"

DEFAULT_PUSH_MAX_CHARS = 8_000
MIN_MAX_CHARS = 512  # the markers, the longest sender name and the truncation notice fit easily
MAX_SENDER_CHARS = 128

Span = tuple[int, int]  # [start, end) in the text as given

_LETTERS = "externalcontent"
_GAP = "[^a-z0-9]*"
_WORD_RE = re.compile(_GAP.join(_LETTERS))

_DECODE_PASSES = 3  # &amp;#101; is two levels; a third covers one more round of escaping
_ENCODED_RE = re.compile(
    r"&(?:#[0-9]{1,8}|#[xX][0-9a-fA-F]{1,7}|[A-Za-z][A-Za-z0-9]{1,31});?|(?:%[0-9A-Fa-f]{2})+"
)
# Markup read as separators, several ways: as a renderer shows it (comments vanish whole), as someone
# skimming the source reads it (tags vanish, a comment's text stays), and as a crude stripper does it
# (anything between "<" and ">"). Loose, to err towards finding the word; an unclosed comment is not
# one, as read to the end it would hide everything after it.
_MARKUP_READINGS = (
    re.compile(r"<!--.*?-->|<\s*/?\s*[A-Za-z!?][^<>]*>", re.DOTALL),
    re.compile(r"<!--|-->|<\s*/?\s*[A-Za-z?][^<>]*>|<![A-Za-z][^<>]*>"),
    re.compile(r"<[^<>]*>"),
)
# For pushes only real markup is stripped, so "a < b and c > d" keeps its text.
_HTML_TAG_RE = re.compile(r"<!--.*?(?:-->|\Z)|</?[A-Za-z][^<>]*>|<[!?][^<>]*>", re.DOTALL)

# Control characters (a terminal host would obey ESC) and bidi overrides/isolates, which can make
# "tnetnoc_lanretxe" display as the envelope word; \t and \n stay.
_CONTROL_RE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_LINE_BREAK_RE = re.compile(r"\r\n?|[\u2028\u2029\x85\x0b\x0c]")

# Decorated Latin letters that UTS #39 leaves alone, named for the letter they are drawn on: a hook, a
# curl, a stroke the table lacks ("ⱥ"), and the regional indicator symbols ("🇪"), which are not
# confusables in UTS #39 (symbols, not letters) but show as boxed letters. The envelope word must not
# be spelled with any of them, so they fold to the letter their Unicode name says they are, which is
# a rule over Unicode's own data rather than a hand list of characters.
_NAMED_LATIN_LETTER = re.compile(
    r"\b(?:LATIN\b.*\bLETTER (?:SMALL CAPITAL )?|REGIONAL INDICATOR SYMBOL LETTER )([A-Z])\b"
)


def _named_letter(char: str) -> str:
    """The Latin letter a decorated letter is named for, else ``char`` case-folded."""
    if char.isascii() or unicodedata.combining(char):
        return char.casefold()
    match = _NAMED_LATIN_LETTER.search(unicodedata.name(char, ""))
    return match.group(1).lower() if match else char.casefold()


@lru_cache(maxsize=8192)  # bounded: a sender controls which characters arrive
def _fold(char: str) -> str:
    """The detection form of one character: its UTS #39 skeleton, decomposed and case-folded.

    ``digit_policy="tr39"`` keeps the table's "0 ≡ o" and "1 ≡ l", as "C0NTENT" reads as the word.
    The skeleton may drop a character (zero-width, spaces) or widen it ("ɱ" is "rn"); either is fine
    for detection, which only looks for the word's letters in order.
    """
    out: list[str] = []
    for part in unicodedata.normalize("NFKD", char):
        skeleton = skeleton_key(part, digit_policy="tr39")
        out.extend(_named_letter(c) for c in unicodedata.normalize("NFKD", skeleton))
    return "".join(out)


def _rewrite(
    chars: list[str],
    spans: list[Span],
    pattern: re.Pattern[str],
    replace: Callable[[str], str | None],
) -> tuple[list[str], list[Span]] | None:
    """The view with each match of ``pattern`` that ``replace`` rewrites (not None) replaced, every new
    character keeping the span of the whole match; None when nothing was rewritten."""
    text = "".join(chars)
    new_chars: list[str] = []
    new_spans: list[Span] = []
    pos = 0
    for m in pattern.finditer(text):
        replacement = replace(m.group())
        if replacement is None:
            continue
        new_chars.extend(chars[pos : m.start()])
        new_spans.extend(spans[pos : m.start()])
        new_chars.extend(replacement)
        new_spans.extend([(spans[m.start()][0], spans[m.end() - 1][1])] * len(replacement))
        pos = m.end()
    if pos == 0:
        return None
    return new_chars + chars[pos:], new_spans + spans[pos:]


def _decoded(escape: str) -> str | None:
    # a run of %-escapes is decoded together: "%C3%A9" is one character in UTF-8
    decoded = urllib.parse.unquote(escape) if escape[0] == "%" else html.unescape(escape)
    return decoded if decoded != escape else None


def _fold_view(chars: list[str], spans: list[Span]) -> tuple[str, list[Span]]:
    folded: list[str] = []
    folded_spans: list[Span] = []
    for char, span in zip(chars, spans, strict=True):
        form = _fold(char)
        folded.append(form)
        folded_spans.extend([span] * len(form))
    return "".join(folded), folded_spans


def _detection_views(text: str) -> Iterator[tuple[str, list[Span]]]:
    """Folded views of ``text``, each with the span of ``text`` every view character came from: as
    written, and (when there is markup) with markup read as separators, so that ``exter<b></b>nal`` is
    the word. Each reading, because a tag also hides the letters inside it, and ``</external_content>``
    is itself a tag."""
    chars = list(text)
    spans = [(i, i + 1) for i in range(len(text))]
    for _ in range(_DECODE_PASSES):
        decoded = _rewrite(chars, spans, _ENCODED_RE, _decoded)
        if decoded is None:
            break
        chars, spans = decoded
    yield _fold_view(chars, spans)
    # As a reader who skips every character with no ASCII letter or digit in it (a thorn, a symbol):
    # the letters around it then run together, and "EXTERNA1ÞC0NTENT" reads as the word, where the
    # skeleton alone reads the thorn as a "p" (found by tests/delivery/test_xpia.py's property test).
    skipped = [c if _has_ascii_alnum(c) else " " for c in chars]
    if skipped != chars:
        yield _fold_view(skipped, spans)
    for reading in _MARKUP_READINGS:
        without_markup = _rewrite(chars, spans, reading, lambda _: " ")
        if without_markup is not None:
            yield _fold_view(*without_markup)


def _has_ascii_alnum(char: str) -> bool:
    return any(p.isascii() and p.isalnum() for p in unicodedata.normalize("NFKD", char))


def find_envelope_words(text: str) -> list[Span]:
    """Spans of ``text`` that read as the envelope word in any disguise: sorted, merged where they overlap."""
    found = sorted(
        (spans[m.start()][0], spans[m.end() - 1][1])
        for view, spans in _detection_views(text)
        for m in _WORD_RE.finditer(view)
    )
    merged: list[Span] = []
    for start, end in found:
        if merged and start < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def neutralise(text: str) -> str:
    """``text`` with every disguise of the envelope word replaced by :data:`DEFANGED_WORD`.

    Repeats until nothing is found, because a replacement can change what the text around it reads as
    (a tag it split no longer hides letters). It ends: every match needs a letter read as "x", the
    replacement has none, and each pass removes at least one of the text's own characters.
    """
    while spans := find_envelope_words(text):
        parts: list[str] = []
        pos = 0
        for start, end in spans:
            parts.append(text[pos:start])
            parts.append(DEFANGED_WORD)
            pos = end
        parts.append(text[pos:])
        text = "".join(parts)
    return text


def _clean_text(text: str) -> str:
    """Line breaks unified to \\n, control characters and bidi overrides dropped."""
    return _CONTROL_RE.sub("", _LINE_BREAK_RE.sub("\n", text))


def sanitise_for_push(text: str) -> str:
    """Text fit for a channel push: tags stripped, stray ``<``/``>`` turned into ``‹``/``›``, no envelope word."""
    text = _HTML_TAG_RE.sub("", _clean_text(text))
    return neutralise(text.replace("<", "‹").replace(">", "›"))


def _single_line(text: str) -> str:
    return " ".join(_clean_text(text).split())


# Characters of a sender name that could end the attribute, or decode (as an entity or %-escape) into
# a "<" whose tag would run over the fixed words after the value; each becomes a look-alike that reads
# the same to a person and decodes to nothing.
_INERT_ATTRIBUTE = str.maketrans(
    {'"': "'", "<": "‹", ">": "›", "&": "＆", "%": "％", "[": "(", "]": ")"}
)


def _attribute(value: str) -> str:
    """A sender name as an attribute value: one line, bounded, inert, no envelope word.

    Not entity-escaped on purpose: an entity is exactly what a reader (or the detection) decodes back.
    """
    return neutralise(_single_line(value)[:MAX_SENDER_CHARS].translate(_INERT_ATTRIBUTE))


# Starts with a letter the envelope word does not have, so a body ending in "external_conten" cannot
# borrow the notice's first letter to complete it.
TRUNCATION_NOTICE = "\n[message truncated]"
# Text beyond this many times the limit is dropped before any scanning, so a huge mail costs no more
# than a long one; tag stripping rarely shrinks text by more than that.
_PRECUT_FACTOR = 4


def _check_max_chars(max_chars: int) -> None:
    if max_chars < MIN_MAX_CHARS:
        raise ValueError(
            f"max_chars={max_chars} leaves no room for the envelope and a useful body; "
            f"use at least {MIN_MAX_CHARS}"
        )


def _prefix_within(body: str, budget: int) -> str:
    """The longest neutral prefix of ``body`` found within ``budget`` characters.

    A prefix of neutral text is not always neutral: a cut can leave half an escape (``&#1010;`` is
    "ϲ", ``&#101`` is "e") or half a tag that no longer hides the letters next to it. So the prefix is
    neutralised again, and cut shorter if the replacements made it grow; each round shortens it.
    """
    kept = body[:budget]
    while len(safe := neutralise(kept)) > budget:
        kept = kept[: len(kept) - (len(safe) - budget)]
    return safe


def _bounded(
    head: str, raw_body: str, tail: str, max_chars: int | None, prepare: Callable[[str], str]
) -> str:
    """``head + prepare(raw_body) + tail``, the body shortened (never the markers) to fit ``max_chars``.

    The truncation notice goes after the tail, outside the envelope: it is ours, not the sender's.
    """
    if max_chars is None:
        return head + prepare(raw_body) + tail
    _check_max_chars(max_chars)
    limit = max_chars * _PRECUT_FACTOR
    body = prepare(raw_body[:limit])
    if len(raw_body) <= limit and len(head) + len(body) + len(tail) <= max_chars:
        return head + body + tail
    kept = _prefix_within(body, max_chars - len(head) - len(tail) - len(TRUNCATION_NOTICE))
    return head + kept + tail + TRUNCATION_NOTICE


def wrap_external(body: str, *, source: Source, sender: str, max_chars: int | None = None) -> str:
    """The tool-result form: ``<external_content sender="…" source="…">\\n…\\n</external_content>``.

    The body keeps its text (angle brackets included); only envelope words are replaced.
    """
    # sender before source: the fixed word "source" separates the attacker's value from the body
    head = f'<{ENVELOPE_WORD} sender="{_attribute(sender)}" source="{source.envelope_word}">\n'
    tail = f"\n</{ENVELOPE_WORD}>"
    return _bounded(head, body, tail, max_chars, lambda text: neutralise(_clean_text(text)))


def wrap_for_channel(
    body: str, *, source: Source, sender: str, max_chars: int = DEFAULT_PUSH_MAX_CHARS
) -> str:
    """The push form: ``[external_content sender="…" source=…]\\n…\\n[/external_content]``, no angle brackets."""
    head = f'[{ENVELOPE_WORD} sender="{_attribute(sender)}" source={source.envelope_word}]\n'
    tail = f"\n[/{ENVELOPE_WORD}]"
    return _bounded(head, body, tail, max_chars, sanitise_for_push)


def bare_for_channel(body: str, *, max_chars: int = DEFAULT_PUSH_MAX_CHARS) -> str:
    """A verified sponsor's chat message for a push: outside any envelope, still sanitised and bounded."""
    return _bounded("", body, "", max_chars, sanitise_for_push)


def bare_for_tool_result(body: str, *, max_chars: int | None = None) -> str:
    """A verified sponsor's chat message in a tool result: outside any envelope, as its push is.

    Its text is kept (angle brackets included) but envelope words are replaced all the same, so it
    cannot close or forge an envelope around anything else in the same result.
    """
    return _bounded("", body, "", max_chars, lambda text: neutralise(_clean_text(text)))
