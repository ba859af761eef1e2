"""Did-you-mean suggestions for misspelled keys, enum values and names."""

from __future__ import annotations

MAX_WORD = 100  # longer is no misspelling, and difflib would be slow and memory-hungry on it


def closest(word, choices, cutoff: float = 0.6) -> str | None:
    """The choice `word` most likely misspells, or None. Case-insensitive, so
    'l1' finds 'L1' and 'Statistics' finds 'statistics'."""
    if not isinstance(word, str) or not word or len(word) > MAX_WORD:
        return None
    names = [c for c in dict.fromkeys(choices) if isinstance(c, str) and c]
    if word in names:
        return None
    lowered: dict[str, str] = {}
    for c in names:
        lowered.setdefault(c.lower(), c)
    key = word.lower()
    if key in lowered:
        return lowered[key]
    for sep in ("-", " ", "."):  # 'nan-check', 'nan check' -> 'nan_check'
        if key.replace(sep, "_") in lowered:
            return lowered[key.replace(sep, "_")]
    import difflib  # only for a word that is no choice: most runs never get here

    hits = difflib.get_close_matches(key, list(lowered), n=1, cutoff=cutoff)
    return lowered[hits[0]] if hits else None


def did_you_mean(word, choices) -> str:
    """" (did you mean 'statistics'?)" for a close match, else ""."""
    hit = closest(word, choices)
    return f" (did you mean '{hit}'?)" if hit else ""
