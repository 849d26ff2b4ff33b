"""Tricky commit messages for holding the trailer parser to `git interpret-trailers --parse`.

Each entry is (name, message). The expected output is never written here: the tests ask git.
"""

from __future__ import annotations

SCISSORS = "# ------------------------ >8 ------------------------\n"

CORPUS: list[tuple[str, str]] = [
    ("plain", "Title\n\nBody text.\n\nRow: GOV-CORE\n"),
    ("two-trailers", "Title\n\nRow: A-B\nSigned-off-by: Ada <ada@example.com>\n"),
    ("title-only", "Title\n"),
    ("title-is-trailer", "Row: GOV-CORE\n"),
    ("title-paragraph-of-trailers", "Row: GOV-CORE\nKey: v\n"),
    ("title-then-trailers-no-blank", "Title\nRow: GOV-CORE\n"),
    ("empty", ""),
    ("only-newline", "\n"),
    ("leading-blank-line", "\nRow: GOV-CORE\n"),
    ("leading-blank-lines-then-title", "\n\nTitle\n\nRow: X-Y\n"),
    ("no-final-newline", "Title\n\nRow: GOV-CORE"),
    ("no-final-newline-two", "Title\n\nA: 1\nB: 2"),
    ("crlf", "Title\r\n\r\nBody\r\n\r\nRow: GOV-CORE\r\nKey: v\r\n"),
    ("crlf-continuation", "Title\r\n\r\nKey: a\r\n  b\r\n"),
    ("crlf-blank-in-middle", "Title\r\n\r\nA: 1\r\n\r\nB: 2\r\n"),
    ("empty-value", "Title\n\nKey:\nOther: x\n"),
    ("empty-value-spaces", "Title\n\nKey:   \t\n"),
    ("key-with-digits", "Title\n\nX-Bug-123: yes\nV2: z\n"),
    ("key-space-colon", "Title\n\nKey : v\nK2\t: w\n"),
    ("key-with-inner-space", "Title\n\nKey word: v\n"),
    ("key-underscore", "Title\n\nKey_word: v\n"),
    ("key-dot", "Title\n\nKey.word: v\n"),
    ("colon-first", "Title\n\n: v\nKey: w\n"),
    ("value-with-colons", "Title\n\nLink: https://example.com/a:b\n"),
    ("non-ascii-key", "Title\n\nCl\u00e9: v\n"),
    ("non-ascii-value", "Title\n\nReviewed-by: J\u00fcrgen <j@example.com>\n"),
    ("continuation-spaces", "Title\n\nKey: first\n  second\n\tthird\n"),
    ("continuation-after-non-trailer", "Title\n\nnot a trailer\n  cont\nSigned-off-by: A <a@b>\n"),
    ("continuation-first-in-block", "Title\n\n  leading\nSigned-off-by: A <a@b>\n"),
    ("continuation-first-no-sob", "Title\n\n  leading\nKey: v\n"),
    ("continuation-blank-ws-line", "Title\n\nKey: a\n \nOther: b\n"),
    ("trailing-ws-lines", "Title\n\nKey: v\n \n\t\n"),
    ("trailing-empty-lines", "Title\n\nKey: v\n\n\n"),
    ("trailing-empty-then-ws", "Title\n\nKey: v\n\n \n"),
    ("mixed-not-all-trailers", "Title\n\nKey: v\nsome prose\n"),
    ("25pc-with-sob", "Title\n\nprose one\nprose two\nprose three\nSigned-off-by: A <a@b>\n"),
    ("25pc-below-with-sob", "Title\n\np1\np2\np3\np4\nSigned-off-by: A <a@b>\n"),
    ("25pc-cherry-pick", "Title\n\np1\np2\nKey: v\n(cherry picked from commit 0123456789abcdef)\n"),
    ("cherry-pick-only", "Title\n\n(cherry picked from commit 0123456789abcdef)\n"),
    ("sob-no-space", "Title\n\np1\np2\nSigned-off-by:A <a@b>\n"),
    ("sob-lowercase", "Title\n\np1\nsigned-off-by: A <a@b>\n"),
    ("sob-continuations-counted", "Title\n\np1\n p2\n p3\n p4\nSigned-off-by: A <a@b>\n"),
    ("comment-lines-in-block", "Title\n\nKey: v\n# a comment\nOther: w\n"),
    ("comment-trailing", "Title\n\nKey: v\n# Please enter the commit message\n#\n"),
    ("comment-only-message", "# only a comment\n"),
    ("comment-two-lines", "#a\n#b\n"),
    ("comment-title", "# comment\nTitle\n\nKey: v\n"),
    ("comment-before-blank-title", "# c\n\nKey: v\n"),
    ("comment-key", "Title\n\n#Key: v\nOther: w\n"),
    ("comment-then-continuation", "Title\n\nKey: v\n# c\n  cont\n"),
    ("hash-not-first", "Title\n\nKey: v #1\n"),
    ("divider", "Title\n\nRow: A-B\n---\n file | 1 +\n"),
    ("divider-trailers-after", "Title\n\nBody\n---\nRow: A-B\n"),
    ("divider-space", "Title\n\nKey: v\n--- a/file\n+++ b/file\n"),
    ("divider-four-dashes", "Title\n\nBody\n----\nKey: v\n"),
    ("divider-no-newline-at-end", "Title\n\nKey: v\n---"),
    ("divider-crlf", "Title\r\n\r\nKey: v\r\n---\r\nOther: w\r\n"),
    ("divider-tab", "Title\n\nBody\n---\tnote\n\nKey: v\n"),
    ("divider-indented", "Title\n\nBody\n ---\n\nKey: v\n"),
    (
        "github-squash",
        "Title (#12)\n\n* one\n\n* two\n\nRow: A-B\n\n---------\n\nCo-authored-by: B <1+b@users.noreply.github.com>\n",
    ),
    ("scissors", "Title\n\nKey: v\n" + SCISSORS + "diff --git a/x b/x\nOther: w\n"),
    ("scissors-first-line", SCISSORS + "Key: v\n"),
    ("scissors-mid-body", "Title\n\nBody\n" + SCISSORS + "\nKey: v\n"),
    ("scissors-without-comment", "Title\n\nKey: v\n------------------------ >8 ------------------------\nX: y\n"),
    ("conflicts-block", "Title\n\nKey: v\n\nConflicts:\n\tfile.c\n\tother.c\n"),
    ("conflicts-then-comment", "Title\n\nKey: v\n\nConflicts:\n\tfile.c\n# c\n"),
    ("conflicts-followed-by-text", "Title\n\nKey: v\n\nConflicts:\n\tfile.c\nmore\n"),
    ("conflicts-only-after-title", "Title\nConflicts:\n\ta.c\n"),
    ("trailer-looking-prose", "Title\n\nNote: this is prose that happens to look like a trailer.\n"),
    ("url-line", "Title\n\nhttps://example.com\nKey: v\n"),
    ("many-blank-paragraphs", "Title\n\n\n\nKey: v\n\n\n\nOther: w\n"),
    ("last-paragraph-prose", "Title\n\nKey: v\n\nprose\n"),
    ("tab-title", "\tTitle\n\nKey: v\n"),
    ("ws-only-title-line", "  \nKey: v\n"),
    ("ws-lines-before-title", " \n\t\nTitle\n\nKey: v\n"),
    ("form-feed-line", "Title\n\nKey: v\n\x0c\nOther: w\n"),
    ("vertical-tab-continuation", "Title\n\nKey: v\n\x0bnext\n"),
    ("cr-only-line", "Title\n\nKey: v\r\n\r\n"),
    ("bare-cr-in-value", "Title\n\nKey: a\rb\n"),
    ("bug-hash-separator", "Title\n\nBug #42\n"),
    ("long-block", "Title\n\n" + "".join(f"K{i}: v{i}\n" for i in range(30))),
    (
        "assisted-by",
        "Title\n\nFOLLOWING_AGENTS_PROTOCOL\n\nFollowing-Agents-Protocol: true\nAI-Assisted: true\n"
        "Assisted-by: Agent:model-1 [tool] [other]\n",
    ),
    ("co-authored", "Title\n\nCo-authored-by: A <a@example.com>\nCo-authored-by: B <b@example.com>\n"),
    ("trailer-with-unicode-space", "Title\n\nKey:\u00a0v\u00a0\n"),
    ("value-only-spaces-continuation", "Title\n\nKey:\n  v\n"),
    ("dash-key", "Title\n\n-: v\n--x-: w\n"),
]


def git_version() -> tuple[int, ...]:
    """The installed git's version, e.g. (2, 39, 5)."""
    import re
    import subprocess

    out = subprocess.run(["git", "--version"], capture_output=True, text=True, check=True, timeout=30).stdout
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", out)
    assert m, out
    return tuple(int(g or 0) for g in m.groups())


APPENDS_NEWLINE = (2, 46, 2)  # from this git on, interpret-trailers appends a missing final newline


def git_modelled(message: str, no_divider: bool, final_newline: bool, timeout_s: float = 3.0) -> str | None | bool:
    """What `git interpret-trailers --parse [--no-divider]` of the modelled behaviour prints. With
    `final_newline` (git 2.46.2+) the specification is the newer git's: the input with a newline appended
    when it is non-empty and lacks one; an older installed git is asked about exactly that input. Without
    it, an older installed git is asked about the message itself; False when the installed git is newer
    and the message lacks its newline, so no installed git can say what older ones print."""
    newer = git_version() >= APPENDS_NEWLINE
    lacks = bool(message) and not message.endswith("\n")
    if final_newline:
        return git_interpret_trailers(message + "\n" if lacks and not newer else message, no_divider, timeout_s)
    if newer and lacks:
        return False
    return git_interpret_trailers(message, no_divider, timeout_s)


def git_interpret_trailers(message: str, no_divider: bool, timeout_s: float = 3.0) -> str | None:
    """What `git interpret-trailers --parse [--no-divider]` prints for `message`, with no git config;
    None when git hangs (git 2.39 loops forever on a `---` line followed by a scissors line)."""
    import os
    import subprocess

    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "LC_ALL": "C"}
    for var in ("GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT"):
        env.pop(var, None)
    args = ["git", "interpret-trailers", "--parse"] + (["--no-divider"] if no_divider else [])
    try:
        proc = subprocess.run(
            args,
            input=message.encode("utf-8", "surrogateescape"),
            capture_output=True,
            env=env,
            timeout=timeout_s,
            check=True,
        )
    except subprocess.TimeoutExpired:
        return None
    return proc.stdout.decode("utf-8", "surrogateescape")
