"""A pure-Python parser of commit-message trailers that agrees with git's trailer.c byte for byte.

Two modes: `hook` is `git interpret-trailers --parse` (a `---` line followed by whitespace starts the
patch part, which is ignored), `range` is `--parse --no-divider`, what `git log --format=%(trailers)` sees;
`commit_trailers()` also skips a commit message's leading blank lines first, as git's pretty printer does.
Git's own rules, in order:

1. the end of the log message: the `---` divider (hook mode), then git's "ignored bytes" (a trailing
   run of comment and empty lines, an old `Conflicts:` block, and everything from the scissors line);
2. the title paragraph (up to the first blank line, comment lines skipped) is never a trailer block;
3. scanning back from the end, the last paragraph is the block when it is all trailers, or when it has a
   git-generated line (`Signed-off-by: `, `(cherry picked from commit `) and at least 25% trailers;
   indented lines are continuations, comment lines are neither;
4. continuation lines are folded into the trailer above; `--parse` unfolds them to one space.

Only ASCII counts as letters, digits and space here, as in git's ctype table (no locale, no \\v, \\f).

The modelled git is 2.46.2 or later: `git interpret-trailers` (either mode) appends a newline to non-empty
input that lacks one, which makes a `---` or `Conflicts:` on the last line count; `final_newline=False`
(`rowgate trailers --no-final-newline`) models older git. `git log` reads a commit's message as stored, so
`commit_trailers()` never appends one.
Git's default configuration is assumed (separator `:`, comment char `#`, no `trailer.*` keys): rowgate
runs git without user or system config for the same reason.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import TYPE_CHECKING, Literal, NamedTuple

if TYPE_CHECKING:
    from ..linear import Meter

Mode = Literal["hook", "range"]
MODES: tuple[str, ...] = ("hook", "range")
MODELLED_GIT = "2.46.2"  # interpret-trailers appends a missing final newline from this version on

_SPACE = " \t\n\r"  # git's isspace(): no \v, no \f, nothing outside ASCII
_BLANK = " \t\r"  # is_blank_line() skips spaces up to the newline
_GIT_GENERATED = ("Signed-off-by: ", "(cherry picked from commit ")
_CUT_LINE = "\n# ------------------------ >8 ------------------------\n"
_DIVIDER = re.compile(r"^---[ \t\n\r]", re.M)
# find_separator(): letters, digits and '-', then optional blanks, then the separator.
_SEPARATOR = re.compile(r"([A-Za-z0-9-]+)[ \t]*:")  # group 1: the key
_UNFOLD = re.compile(r"\n[ \t\n\r]*")


class Trailer(NamedTuple):
    key: str
    value: str  # unfolded and trimmed, as `--parse` prints it
    raw: str  # the trailer's lines as written, continuation lines included

    def render(self) -> str:
        return f"{self.key}: {self.value}\n"


class TrailerBlock(NamedTuple):
    """Where git finds the trailer block of a message, and what it holds."""

    message: str  # the text the offsets refer to
    start: int  # offset of the block's first line; == end when there is no block
    end: int  # end of the log message: divider, trailing comments and scissors excluded
    lines: tuple[str, ...]  # the block's logical lines (continuations folded, newlines kept)
    trailers: tuple[Trailer, ...]

    @property
    def found(self) -> bool:
        return self.start < self.end

    def render(self) -> str:
        """Exactly what `git interpret-trailers --parse` prints."""
        return "".join(t.render() for t in self.trailers)


def parse(message: str, mode: Mode = "hook", final_newline: bool = True, meter: Meter | None = None) -> TrailerBlock:
    """Parse `message` (text; undecodable bytes as surrogate escapes) the way `git interpret-trailers
    --parse` does in `mode` (range: `--no-divider`); `final_newline` as git 2.46.2 and later do. `meter`
    counts the work: each pass of a string method or regex over a stretch of text adds that stretch, and
    each line a loop visits adds the line (a test holds the total linear in the message)."""
    if mode not in MODES:
        raise ValueError(f"unknown trailer mode {mode!r}; known: {', '.join(MODES)}")
    message = _as_git_reads(message, final_newline)
    end = len(message)
    if mode == "hook":
        m = _DIVIDER.search(message)
        if m is not None:
            end = m.start()
    if meter:
        meter.add(0, len(message) * 3)  # the final-newline and NUL checks and the divider search
    if _is_plain(message, end):
        if meter:
            meter.add(0, len(message) * 12)  # _is_plain's and _parse_plain's passes, each over the text
        return _parse_plain(message, end)
    return parse_full(message, mode, final_newline=False, meter=meter)  # already as git reads it


def _as_git_reads(message: str, final_newline: bool) -> str:
    """The input as git's trailer code sees it: a newline appended to non-empty input lacking one (git
    2.46.2+, before anything else), then cut at the first NUL (git handles the message as a C string)."""
    if final_newline and message and not message.endswith("\n"):
        message += "\n"
    nul = message.find("\0")
    return message[:nul] if nul >= 0 else message


def parse_full(message: str, mode: Mode, final_newline: bool = True, meter: Meter | None = None) -> TrailerBlock:
    """Git's algorithm step by step, for any message (parse() takes a shortcut for plain ones)."""
    message = _as_git_reads(message, final_newline)
    end = end_of_log_message(message, no_divider=(mode == "range"), meter=meter)
    start = trailer_block_start(message, end, meter)
    if start >= end:
        return TrailerBlock(message, start, end, (), ())
    lines = _logical_lines(message[start:end], meter)
    trailers = []
    for line in lines:
        if meter:
            meter.add(0, 3 * len(line))  # the separator match, the strip and the unfold
        if line.startswith("#"):
            continue
        m = _SEPARATOR.match(line)
        if m is None:
            continue
        sep = m.end() - 1
        value = _UNFOLD.sub(" ", line[sep + 1 :].strip(_SPACE)).strip(_SPACE)
        trailers.append(Trailer(line[:sep].strip(_SPACE), value, line))
    return TrailerBlock(message, start, end, tuple(lines), tuple(trailers))


# A plain message has no comment or CR line, no Conflicts block, no NUL and no line of only blanks, and
# its last paragraph has no indented line: then a blank line is an empty line, nothing continues a
# trailer, and only empty lines trail. Most commits are plain.
_BLANK_LINE = re.compile(r"^[ \t]+$", re.M)


def _is_plain(message: str, end: int) -> bool:
    """Whether `message` (cut at its first NUL by parse()) is plain, up to `end`."""
    if "\n#" in message or "\r" in message or "Conflicts:\n" in message or message.startswith("#"):
        return False
    text = message if end == len(message) else message[:end]
    if "\n " not in text and "\n\t" not in text and not text.startswith((" ", "\t")):
        return True
    if _BLANK_LINE.search(text):
        return False
    last = text.rstrip("\n").rfind("\n\n")
    if last < 0:
        return False
    tail = text[last + 2 :]
    return "\n " not in tail and "\n\t" not in tail and not tail.startswith((" ", "\t"))


def _parse_plain(message: str, end: int) -> TrailerBlock:
    """parse() for a plain message (ending at `end`): the same rules, with the cases that cannot occur
    left out."""
    body = len(message.rstrip("\n")) if end == len(message) else len(message[:end].rstrip("\n"))
    if body == 0:  # nothing but newlines: git's run of empty lines starts at the second one
        end = 1 if end >= 2 else end
        return TrailerBlock(message, end, end, (), ())
    if end - body >= 2:
        end = body + 1  # trailing empty lines are ignored; the last line keeps its newline
    # The text ends at `body`, without the final newline, which belongs to the last line.
    if message.startswith("\n"):
        blank = 0  # an empty first line ends the title at once
    else:
        blank = message.find("\n\n", 0, body) + 1  # the first blank line; 0 when there is none
        if blank == 0:
            return TrailerBlock(message, end, end, (), ())
    last = message.rfind("\n\n", 0, body)
    start = last + 2 if last >= 0 else 1
    if start - 1 < blank:
        return TrailerBlock(message, end, end, (), ())
    lines = message[start:body].split("\n")
    parsed = [_plain_line(line) for line in lines]
    if None in parsed and not _recognized_block(lines, parsed):
        return TrailerBlock(message, end, end, (), ())
    raw = tuple([line + "\n" for line in lines])
    trailers = tuple([t for t in parsed if t is not None])
    if end == body:  # no final newline: the last line has none
        raw = raw[:-1] + (lines[-1],)
        if parsed[-1] is not None:
            trailers = trailers[:-1] + (parsed[-1]._replace(raw=lines[-1]),)
    return TrailerBlock(message, start, end, raw, trailers)


@lru_cache(maxsize=4096)
def _plain_line(line: str) -> Trailer | None:
    """The trailer on one line of a plain block, or None. Cached: the same `Row:` and `Signed-off-by:`
    lines recur across a range, and a range parses thousands of blocks."""
    m = _SEPARATOR.match(line)
    return None if m is None else Trailer(m[1], line[m.end() :].strip(_SPACE), line + "\n")


def _recognized_block(lines: list[str], parsed: list[Trailer | None]) -> bool:
    """A paragraph with non-trailer lines is still the block when it has a git-generated line and at
    least 25% trailer lines (a git-generated line counts as one, separator or not)."""
    generated = [line.startswith(_GIT_GENERATED) for line in lines]
    if not any(generated):
        return False
    trailer_lines = sum(1 for t, g in zip(parsed, generated) if t is not None or g)
    return trailer_lines * 3 >= len(lines) - trailer_lines


def commit_trailers(message: str) -> TrailerBlock:
    """The trailers of a commit's raw message (`%B`), exactly as `git log --format=%(trailers)` sees them."""
    block = _last_paragraph_block(message)
    return block if block is not None else parse(skip_blank_lines(message), "range", final_newline=False)


# The block of a plain message depends only on the text after its last empty line (the title always ends
# at or before that line), and a range repeats the same few last paragraphs (one row, the same sign-offs):
# each is parsed once, by _parse_plain on a stand-in message "T\n\n" + that text, and the offsets shifted.
_TAILS: dict[str, tuple[int, int, tuple[str, ...], tuple[Trailer, ...]] | None] = {}
_TAILS_MAX = 4096
_STAND_IN = "T\n\n"


def _last_paragraph_block(message: str) -> TrailerBlock | None:
    """commit_trailers() for a plain message whose last paragraph follows an empty line and has no
    indented line; None for any other message (the general rules decide)."""
    if (
        message[:1] in " \t\r\n#"  # also the empty message: leading blank lines, a comment or a scissors line
        or "\n#" in message
        or "\r" in message
        or "Conflicts:\n" in message
        or "\0" in message
    ):
        return None
    last = message.rfind("\n\n")  # the last empty line; unless the message ends with it, text follows
    if last < 0:
        return None
    if last + 2 == len(message):  # trailing empty lines (rare in a commit): the last one before them
        last = message.rfind("\n\n", 0, len(message.rstrip("\n")))
        if last < 0:
            return None
    tail = message[last + 2 :]  # starts with the paragraph's first character, never a newline
    if tail in _TAILS:
        hit = _TAILS[tail]
    else:
        hit = None
        if "\n " not in tail and "\n\t" not in tail and tail[0] not in " \t":
            block = _parse_plain(_STAND_IN + tail, len(_STAND_IN) + len(tail))
            hit = (block.start - len(_STAND_IN), block.end - len(_STAND_IN), block.lines, block.trailers)
        if len(_TAILS) >= _TAILS_MAX:
            _TAILS.clear()
        _TAILS[tail] = hit
    if hit is None:
        return None
    shift = last + 2
    # tuple.__new__: TrailerBlock(...) without its Python-level __new__, for once per commit of a range
    return tuple.__new__(TrailerBlock, (message, hit[0] + shift, hit[1] + shift, hit[2], hit[3]))


def skip_blank_lines(message: str) -> str:
    """Drop leading lines made only of whitespace (git's pretty.c skip_blank_lines)."""
    if not message.startswith((" ", "\t", "\r", "\n")):
        return message
    pos = 0
    while pos < len(message):
        nl = message.find("\n", pos)
        stop = len(message) if nl < 0 else nl + 1
        if message[pos:stop].strip(_SPACE):
            break
        pos = stop
    return message[pos:]


def end_of_log_message(message: str, no_divider: bool = False, meter: Meter | None = None) -> int:
    """The offset where the log message ends (git's find_end_of_log_message)."""
    end = len(message)
    if meter:
        meter.add(0, 2 * end)  # the divider search, then the scissors search
    if not no_divider:
        m = _DIVIDER.search(message)
        if m is not None:
            end = m.start()
    return end - ignored_log_message_bytes(message, end, meter)


def ignored_log_message_bytes(buf: str, length: int, meter: Meter | None = None) -> int:
    """How many bytes at the end of buf[:length] git ignores: trailing comment and empty lines, an old
    `Conflicts:` block, and everything from the scissors line on (git's commit.c)."""
    cutoff = _scissors(buf, length)
    region = buf[:cutoff]
    if "\n#" in region or "Conflicts:\n" in region or region.startswith("#"):
        return _ignored_slow(buf, length, cutoff, meter)
    # Only empty lines can form the trailing run. Git keeps its start in `boc`, where 0 also means "none":
    # a run that starts at offset 0 begins at the second line instead.
    if meter:
        meter.add(0, 4 * cutoff)  # the region copy, its three membership tests and rstrip
    body = len(region.rstrip("\n"))
    if body == 0:
        boc = 1 if cutoff >= 2 else 0
    else:
        boc = body + 1 if cutoff - body >= 2 else 0
    return length - boc if boc else length - cutoff


def _ignored_slow(buf: str, length: int, cutoff: int, meter: Meter | None = None) -> int:
    boc = 0  # beginning of the trailing run; 0 doubles as "none", as in git
    bol = 0
    in_conflicts = False
    while bol < cutoff:
        nl = buf.find("\n", bol, length)
        next_bol = length if nl < 0 else nl + 1
        if meter:
            meter.add(bol, next_bol)
        first = buf[bol]
        if first == "#" or first == "\n":
            if not boc:
                boc = bol
        elif buf.startswith("Conflicts:\n", bol):
            in_conflicts = True
            if not boc:
                boc = bol
        elif in_conflicts and first == "\t":
            pass  # a pathname in the conflicts block
        elif boc:
            boc = 0
            in_conflicts = False
        bol = next_bol
    return length - boc if boc else length - cutoff


def _scissors(buf: str, length: int) -> int:
    """wt_status_locate_end(): the scissors line cuts the message. A scissors line after `length` is
    ignored, as newer git does (git 2.39 loops forever on a `---` line followed by one)."""
    if buf.startswith(_CUT_LINE[1:]):
        return 0
    p = buf.find(_CUT_LINE)
    if p >= 0 and p + 1 < length:
        return p + 1
    return length


def trailer_block_start(buf: str, length: int, meter: Meter | None = None) -> int:
    """The offset of the trailer block's first line, or `length` when there is none (git's
    find_trailer_block_start)."""
    if length == 0:
        return 0
    lines = buf[:length].split("\n")
    if meter:
        meter.add(0, 2 * length)  # the copy and the split
    if not lines[-1]:
        lines.pop()  # a final newline belongs to the last line (git's last_line())
    # The first paragraph is the title and cannot be trailers.
    end_of_title = len(lines)
    for i, line in enumerate(lines):
        if meter:
            meter.add(0, len(line) + 1)
        if not line.startswith("#") and not line.strip(_BLANK):
            end_of_title = i
            break
    only_spaces = True
    recognized = False
    trailer_lines = non_trailer_lines = possible_continuation = 0
    for i in range(len(lines) - 1, end_of_title - 1, -1):
        line = lines[i]
        if meter:
            meter.add(0, 2 * len(line) + 1)  # the blank test and the separator match
        if line.startswith("#"):
            non_trailer_lines += possible_continuation
            possible_continuation = 0
            continue
        if not line.strip(_BLANK):
            if only_spaces:
                continue
            non_trailer_lines += possible_continuation
            if (recognized and trailer_lines * 3 >= non_trailer_lines) or (trailer_lines and not non_trailer_lines):
                return len("\n".join(lines[: i + 1])) + 1  # the line after the blank one
            return length
        only_spaces = False
        if line.startswith(_GIT_GENERATED):
            trailer_lines += 1
            possible_continuation = 0
            recognized = True
        elif _SEPARATOR.match(line):
            trailer_lines += 1
            possible_continuation = 0
        elif line[0] in _SPACE:
            possible_continuation += 1
        else:
            non_trailer_lines += 1 + possible_continuation
            possible_continuation = 0
    return length


def _logical_lines(block: str, meter: Meter | None = None) -> list[str]:
    """Split the block into lines, folding an indented line into the trailer above it (each logical line
    joined once from its pieces: appending piece by piece copies the line again for every continuation)."""
    out: list[list[str]] = []
    can_continue = False
    for piece in _split_nl(block):
        if meter:
            meter.add(0, 2 * len(piece))  # the split and the separator match
        if can_continue and piece[0] in _SPACE:
            out[-1].append(piece)
            continue
        out.append([piece])
        can_continue = _SEPARATOR.match(piece) is not None
    if meter:
        meter.add(0, len(block))  # the joins
    return ["".join(parts) for parts in out]


def _split_nl(text: str) -> list[str]:
    """Split on '\\n' only, keeping it (str.splitlines also splits on \\r, \\v, \\f and more)."""
    parts = text.split("\n")
    out = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        out.append(parts[-1])
    return out
