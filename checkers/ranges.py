"""The commit range of the record checks: an explicit base when one is given, else every commit since a
configured start (a check's own `since`, else the config `cutover`)."""
from __future__ import annotations

from checkers.context import Context


def commit_range(ctx: Context, base: str | None, head: str | None, since: str | None = None) -> str | None:
    """`--base` (or $ROWGATE_BASE, or pre-commit's PRE_COMMIT_FROM_REF) wins and starts at the merge
    base; otherwise `<since or cutover>..head`. None when neither exists: the caller has no range."""
    if base or ctx.env.get(ctx.config.base.env) or ctx.env.get("PRE_COMMIT_FROM_REF", "").strip("0"):
        return ctx.base_range(base, head).spec
    start = since or ctx.config.cutover
    if not start:
        return None
    start_sha = ctx.git.must_resolve(start, "range start (config cutover)")
    head_sha = ctx.git.must_resolve(head or "HEAD", "head")
    key = ("since", start_sha, head_sha)
    if key not in ctx._bases:  # print where the range came from, once per process
        ctx._bases[key] = True
        print(f"rowgate: range {start_sha[:12]}..{head_sha[:12]} (commits since the "
              f"{'check' if since else 'config'} start)", file=ctx.notes)
    return f"{start_sha}..{head_sha}"
