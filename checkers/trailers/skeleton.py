"""The form an identity is matched in by the forbidden-identity rule (TR004): NFKC (fullwidth and styled
letters become plain ones), the Cyrillic and Greek letters that look like Latin ones mapped to those,
invisible characters dropped, and a space between letters and digits, so `Claude3`, `Сlaude` (a Cyrillic
С), `ｃｌａｕｄｅ` and `Qwen3-Coder` read as the names they imitate."""

from __future__ import annotations

import re
import unicodedata

# Lookalikes of Latin letters in other scripts (the common ones of Unicode's confusables list, written out
# here: a name that imitates an assistant's uses these).
_CONFUSABLES = str.maketrans(
    {
        **dict.fromkeys("аӑӓ", "a"),
        "А": "A",
        "В": "B",
        "в": "b",
        "С": "C",
        "с": "c",
        "Е": "E",
        "е": "e",
        "ё": "e",
        "Н": "H",
        "һ": "h",
        "І": "I",
        "і": "i",
        "ї": "i",
        "Ј": "J",
        "ј": "j",
        "К": "K",
        "к": "k",
        "М": "M",
        "м": "m",
        "О": "O",
        "о": "o",
        "Р": "P",
        "р": "p",
        "Ѕ": "S",
        "ѕ": "s",
        "Т": "T",
        "т": "t",
        "Х": "X",
        "х": "x",
        "У": "Y",
        "у": "y",
        "ԁ": "d",
        "ԛ": "q",
        "ԝ": "w",
        "ɡ": "g",
        "ⅼ": "l",
        "Ι": "I",
        "Α": "A",
        "α": "a",
        "Β": "B",
        "Ε": "E",
        "ε": "e",
        "Η": "H",
        "Κ": "K",
        "κ": "k",
        "Μ": "M",
        "Ν": "N",
        "ν": "v",
        "Ο": "O",
        "ο": "o",
        "Ρ": "P",
        "ρ": "p",
        "Τ": "T",
        "τ": "t",
        "Υ": "Y",
        "υ": "u",
        "Χ": "X",
        "χ": "x",
        "Ζ": "Z",
        "ι": "i",
        "ӏ": "l",
        "Ӏ": "I",
        "ɑ": "a",
        "ı": "i",
        "ȷ": "j",
    }
)
_INVISIBLE = re.compile("[\u00ad\u034f\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")
_LETTER_DIGIT = re.compile(r"(?<=[^\W\d_])(?=\d)|(?<=\d)(?=[^\W\d_])")


def skeleton(value: str) -> str:
    """`value` in the form identities are matched in (see the module's docstring)."""
    text = unicodedata.normalize("NFKC", value)
    text = _INVISIBLE.sub("", text).translate(_CONFUSABLES)
    return _LETTER_DIGIT.sub(" ", text)
