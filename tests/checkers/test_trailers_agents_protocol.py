"""The agents-protocol contract on real message shapes (web squashes, forge co-author paragraphs, Assisted-by
declarations with tools, markers, separators): each behaviour fails its seeded message with the exact problem
and passes its twin; where a shape depends on git's parse, real `git interpret-trailers` is asked too."""

from __future__ import annotations

import pytest

from checkers.config import TrailersConfig
from checkers.trailers.contract import Facts, compile_contract, judge
from checkers.trailers.message import read_message
from tests.checkers.trailer_corpus import git_interpret_trailers

CONTRACT = compile_contract(TrailersConfig(presets=["agents-protocol"]))
BODY = (
    "Route the decode GEMV through the plan cache\n\nThe plan is built once per shape, so the heuristic query "
    "leaves the decode step.\n\nFOLLOWING_AGENTS_PROTOCOL\n\n"
)
TRAILERS = "Following-Agents-Protocol: true\nAI-Assisted: true\nAssisted-by: Codex:gpt-5 [Codex]\n"
FORGE = "Co-authored-by: octo-dev <1234567+octo-dev@users.noreply.github.com>\n"
SIGNOFF_HINT = "an assistant is declared with Assisted-by; Signed-off-by and Co-authored-by name people"


def problems(message: str, mode: str = "hook") -> list[tuple[str, str]]:
    return [(p.rule, p.message) for p in judge(read_message(message, mode), CONTRACT, Facts())]  # type: ignore[arg-type]


def keys(message: str, mode: str = "hook") -> list[str]:
    return [t.key for t in read_message(message, mode).trailers]  # type: ignore[arg-type]


# --- 1. forge paragraphs ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["hook", "range"])
@pytest.mark.parametrize("separator", ["---------\n\n", "", "-----\n\n"], ids=["squash-rule", "none", "five"])
def test_forge_co_author_paragraphs_join_the_trailer_block(mode: str, separator: str):
    message = BODY + TRAILERS + "\n" + separator + FORGE + "\n" + FORGE.replace("octo-dev", "hubber")
    assert git_interpret_trailers(message, no_divider=mode == "range") == FORGE.replace("octo-dev", "hubber")
    assert keys(message, mode) == [
        "Following-Agents-Protocol",
        "AI-Assisted",
        "Assisted-by",
        "Co-authored-by",
        "Co-authored-by",
    ]
    assert problems(message, mode) == []


def test_a_three_hyphen_separator_joins_in_range_mode_and_is_the_divider_for_the_hook():
    """git log keeps the `---` line, so the co-author paragraph joins; the hook (and git am) ends the message at
    it. Either way the line is the framing defect it is for this contract."""
    message = BODY + TRAILERS + "\n---\n\n" + FORGE
    assert keys(message, "range")[-1] == "Co-authored-by"
    assert keys(message, "hook")[-1] == "Assisted-by"
    divider = (
        "TR007",
        ("line 11 starts with `---`, git's patch divider: git am and git interpret-trailers drop everything after it"),
    )
    assert problems(message, "range") == problems(message, "hook") == [divider]


def test_forge_paragraph_identities_are_still_checked():
    message = BODY + TRAILERS + "\n---------\n\n" + FORGE + "Co-authored-by: Claude <noreply@anthropic.com>\n"
    assert problems(message, "range") == [
        ("TR004", "Co-authored-by: Claude <noreply@anthropic.com> names an AI (Claude)")
    ]


def test_a_prose_paragraph_still_ends_the_block():
    message = BODY + TRAILERS + "\nReviewed in the meeting.\n\n" + FORGE
    assert keys(message) == ["Co-authored-by"]
    assert problems(message) == [
        ("TR001", "no Following-Agents-Protocol trailer (need at least 1)"),
        ("TR001", "no AI-Assisted trailer (need at least 1)"),
    ]


def test_a_conventional_title_is_never_fused_into_the_trailer_block():
    """`fix: thing` is trailer-shaped, but git never reads the title paragraph as trailers, and neither do we."""
    message = "fix: keep the plan cache warm\n\n" + FORGE
    assert git_interpret_trailers(message, no_divider=False) == FORGE
    assert keys(message) == ["Co-authored-by"]
    message = "fix: keep the plan cache warm\n\n---------\n\n" + FORGE
    assert keys(message, "range") == ["Co-authored-by"]


# --- 2. declared identities --------------------------------------------------------------------------


def test_every_declared_name_is_a_forbidden_identity_agent_model_and_each_tool():
    declared = TRAILERS.replace("[Codex]", "[Codex] [Zed Editor] [ed]")
    for who, name in (
        ("Zed Editor <zed@example.com>", "Zed Editor"),
        ("ed <ed@example.com>", "ed"),
        ("gpt-5 <x@example.com>", None),
    ):
        found = problems(BODY + declared + f"Signed-off-by: {who}\n")
        why = f"names {name}, declared in Assisted-by" if name else "names an AI (gpt-5)"
        assert found == [("TR004", f"Signed-off-by: {who} {why}")]


def test_declared_names_match_whole_words_only():
    declared = TRAILERS.replace("[Codex]", "[Codex] [ed]")
    assert problems(BODY + declared + "Co-authored-by: Fred Edwards <fred@example.com>\n") == []
    assert problems(BODY + declared + "Co-authored-by: Codexia Jones <cj@example.com>\n") == []


# --- 3. AI identity tokens and the forge exemption ---------------------------------------------------


@pytest.mark.parametrize(
    "who,token",
    [
        ("release-bot <ci@example.com>", "bot"),
        ("Team AI <team@example.com>", "AI"),
        ("Build Agent <agent@example.com>", "Agent"),
        ("LLM <x@example.com>", "LLM"),
        ("gpt <x@example.com>", "gpt"),
    ],
)
def test_generic_ai_tokens_are_forbidden_as_whole_words(who: str, token: str):
    assert problems(BODY + TRAILERS + f"Co-authored-by: {who}\n") == [
        ("TR004", f"Co-authored-by: {who} names an AI ({token})")
    ]


@pytest.mark.parametrize(
    "who,token",
    [
        ("Claude3 <c@example.com>", "Claude"),
        ("Cl\u0430ude <c@example.com>", "Claude"),  # a Cyrillic a
        ("\u0421laude Opus <c@example.com>", "Claude"),  # a Cyrillic C
        ("Qwen3-Coder <q@example.com>", "Qwen"),
        ("\uff43\uff4c\uff41\uff55\uff44\uff45 <c@example.com>", "claude"),  # fullwidth
        ("Cl\u200baude <c@example.com>", "Claude"),  # a zero-width space inside
        ("Gemini2.5 <g@example.com>", "Gemini"),
        ("DeepSeek-V3 <d@example.com>", "DeepSeek"),
    ],
)
def test_lookalikes_of_ai_names_are_forbidden(who: str, token: str):
    """Matched as written and in the skeleton (NFKC, Cyrillic and Greek lookalikes, invisible characters
    dropped, letters and digits apart): each of these passed before."""
    assert problems(BODY + TRAILERS + f"Co-authored-by: {who}\n") == [
        ("TR004", f"Co-authored-by: {who} names an AI ({token})")
    ]


@pytest.mark.parametrize("who", ["Alice <a@example.com>", "Kai2 Abbott <k@example.com>", "Ada Tester3 <a@example.com>"])
def test_skeleton_matching_leaves_human_names_alone(who: str):
    assert problems(BODY + TRAILERS + f"Co-authored-by: {who}\n") == []


@pytest.mark.parametrize(
    "who",
    [
        "Alice Abbott <alice@example.com>",
        "Kai Botha <kai@example.com>",
        "Maite Agenti <m@example.com>",
        "Egpt Ltd <e@example.com>",
    ],
)
def test_human_names_containing_a_token_pass(who: str):
    assert problems(BODY + TRAILERS + f"Co-authored-by: {who}\n") == []


def test_the_forge_noreply_exemption_is_case_insensitive_and_anchored_at_the_end():
    bot = "dependabot[bot] <49699333+dependabot[bot]@Users.NoReply.GitHub.com>"
    assert problems(BODY + TRAILERS + f"Co-authored-by: {bot}\n") == []
    for spoof in (
        "dependabot[bot] <x@users.noreply.github.com.example.org>",
        "dependabot[bot] <x@users.noreply.github.com> and bot",
    ):
        assert problems(BODY + TRAILERS + f"Co-authored-by: {spoof}\n") == [
            ("TR004", f"Co-authored-by: {spoof} names an AI (bot)")
        ]
    assert problems(BODY + TRAILERS + f"Signed-off-by: {bot}\n") == [  # a sign-off is never exempt
        ("TR004", f"Signed-off-by: {bot} names an AI (bot)")
    ]


# --- 4. the marker paragraph -------------------------------------------------------------------------

MISSING = ("TR005", "no FOLLOWING_AGENTS_PROTOCOL paragraph before the trailer block (need exactly 1)")


@pytest.mark.parametrize(
    "marker",
    ["FOLLOWING_AGENTS_PROTOCOL (see AGENTS.md)", "FOLLOWING_AGENTS_PROTOCOL\nyes", "FOLLOWING_AGENTS_PROTOCOL "],
)
def test_the_marker_paragraph_is_exactly_the_marker_line(marker: str):
    message = BODY.replace("FOLLOWING_AGENTS_PROTOCOL", marker) + TRAILERS
    assert problems(message) == [MISSING]


def test_separators_are_stepped_over():
    message = BODY + "-------------\n\n" + TRAILERS
    assert problems(message, "range") == [] and problems(message, "hook") == []
    assert problems(BODY.replace("FOLLOWING_AGENTS_PROTOCOL", "-------------") + TRAILERS) == [MISSING]


# --- 7. where the foreign checker is wrong -----------------------------------------------------------


@pytest.mark.parametrize("ws", ["\x0b", "\x0c"], ids=["vertical-tab", "form-feed"])
def test_three_hyphens_then_a_vertical_tab_or_form_feed_is_no_divider(ws: str):
    """git's isspace() has no \\v or \\f: the line is prose, the trailers below it are read."""
    message = BODY.replace("\n\nFOLLOWING", f"\n---{ws}\n\nFOLLOWING") + TRAILERS
    assert git_interpret_trailers(message, no_divider=False) == TRAILERS
    assert problems(message) == []
