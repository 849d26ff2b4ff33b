"""All git access: discovery, base resolution and batched reads, each call with a timeout, no shell,
and no user or system git config (it changes trailer parsing and output formats)."""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from checkers.results import CheckError

DEFAULT_TIMEOUT_S = 60.0
# Variables that would inject configuration into our git processes.
_DROPPED_ENV = ("GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT", "GIT_CONFIG", "GIT_EXEC_PATH")


class GitError(CheckError):
    """A git call that failed in a way the user can fix; the message says what, the hint how."""


def git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _DROPPED_ENV and not k.startswith("GIT_CONFIG_KEY_")
           and not k.startswith("GIT_CONFIG_VALUE_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, GIT_TERMINAL_PROMPT="0",
               GIT_OPTIONAL_LOCKS="0", LC_ALL="C", LANG="C")
    return env


def discover(start: Path) -> Path:
    """The work tree root containing `start` (GitPython's discovery, which follows .git files)."""
    import git  # GitPython; imported here so `rowgate --help` stays fast

    try:
        repo = git.Repo(start, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise GitError(f"{start} is not inside a git repository",
                       hint="run rowgate from a git work tree, or pass --repo PATH") from None
    if repo.working_tree_dir is None:
        raise GitError(f"{repo.git_dir} is a bare repository", hint="run rowgate in a work tree")
    return Path(repo.working_tree_dir)


@dataclass(frozen=True)
class Commit:
    sha: str
    parents: tuple[str, ...]
    author_name: str
    author_email: str
    message: str

    @property
    def short(self) -> str:
        return self.sha[:12]

    @property
    def is_merge(self) -> bool:
        return len(self.parents) > 1


@dataclass(frozen=True)
class BaseRange:
    """A resolved range: where the base came from, and the merge base the range starts at."""

    ref: str
    source: str
    base: str
    head: str
    merge_base: str

    def describe(self) -> str:
        return (f"base {self.ref} ({self.source}) = {self.base[:12]}; merge base {self.merge_base[:12]}; "
                f"head {self.head[:12]}")

    @property
    def spec(self) -> str:
        return f"{self.merge_base}..{self.head}"


class Git:
    def __init__(self, root: Path, timeout_s: float = DEFAULT_TIMEOUT_S):
        self.root = Path(root)
        self.timeout_s = timeout_s
        self._env = git_env()

    def run(self, *args: str, input: bytes | None = None, ok_codes: tuple[int, ...] = (0,),
            timeout_s: float | None = None) -> subprocess.CompletedProcess[bytes]:
        cmd = ["git", "-C", str(self.root), *args]
        try:
            proc = subprocess.run(cmd, input=input, capture_output=True, env=self._env,
                                  timeout=timeout_s or self.timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise GitError(f"git {' '.join(args)} timed out after {timeout_s or self.timeout_s:.0f}s",
                           hint="check the repository for a stuck lock or a huge range") from None
        except FileNotFoundError:
            raise GitError("git is not installed or not on PATH", hint="install git 2.30 or newer") from None
        if proc.returncode not in ok_codes:
            err = proc.stderr.decode(errors="replace").strip().splitlines()
            raise GitError(f"git {' '.join(args)} failed: {err[-1] if err else f'exit {proc.returncode}'}")
        return proc

    def text(self, *args: str, **kw) -> str:
        return self.run(*args, **kw).stdout.decode("utf-8", errors="replace")

    # --- refs ----------------------------------------------------------------
    def resolve(self, ref: str) -> str | None:
        proc = self.run("rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}",
                        ok_codes=(0, 1, 128))
        return proc.stdout.decode().strip() or None if proc.returncode == 0 else None

    def must_resolve(self, ref: str, what: str = "ref") -> str:
        sha = self.resolve(ref)
        if sha is None:
            hint = f"fetch it (git fetch origin {ref.split('/', 1)[-1]}) or pass another --base"
            if self.is_shallow():
                hint = "this is a shallow clone: run git fetch --unshallow (CI: fetch-depth: 0)"
            raise GitError(f"{what} {ref!r} does not resolve to a commit", hint=hint)
        return sha

    def is_shallow(self) -> bool:
        return self.text("rev-parse", "--is-shallow-repository").strip() == "true"

    def merge_base(self, a: str, b: str) -> str:
        proc = self.run("merge-base", a, b, ok_codes=(0, 1))
        if proc.returncode == 1:
            if self.is_shallow():
                raise GitError(f"no merge base between {a[:12]} and {b[:12]} in this shallow clone",
                               hint="run git fetch --unshallow (CI: fetch-depth: 0)")
            raise GitError(f"{a[:12]} and {b[:12]} have unrelated histories (no merge base)",
                           hint="pass a --base that shares history with HEAD")
        return proc.stdout.decode().strip()

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        return self.run("merge-base", "--is-ancestor", ancestor, descendant, ok_codes=(0, 1)).returncode == 0

    def remotes(self) -> list[str]:
        return self.text("remote").split()

    def current_branch(self) -> str | None:
        name = self.text("symbolic-ref", "--quiet", "--short", "HEAD", ok_codes=(0, 1)).strip()
        return name or None

    def default_upstream(self, remote: str | None = None) -> str | None:
        """The upstream main: `<remote>/HEAD`, else `<remote>/main` or `master`. A fork clone has
        `upstream` beside `origin`, and `upstream` wins, so a fork's own main is never the base."""
        remotes = self.remotes()
        candidates = [remote] if remote else [r for r in ("upstream", "origin") if r in remotes]
        for r in candidates:
            head = self.text("symbolic-ref", "--quiet", "--short", f"refs/remotes/{r}/HEAD", ok_codes=(0, 1))
            for ref in (head.strip(), f"{r}/main", f"{r}/master"):
                if ref and self.resolve(ref):
                    return ref
        return None

    # --- batched reads -------------------------------------------------------
    def commits(self, rev_range: str, first_parent: bool = False) -> list[Commit]:
        """Every commit in `rev_range`, oldest first, read by one `git log`."""
        args = ["log", "-z", "--reverse", "--format=%H%x1f%P%x1f%an%x1f%ae%x1f%B"]
        if first_parent:
            args.append("--first-parent")
        out = self.run(*args, rev_range, "--").stdout.decode("utf-8", errors="replace")
        commits = []
        for record in out.split("\0"):
            if not record:
                continue
            sha, parents, name, email, message = record.split("\x1f", 4)
            commits.append(Commit(sha.strip(), tuple(parents.split()), name, email, message))
        return commits

    def ls_files(self) -> list[str]:
        out = self.run("ls-files", "-z").stdout.decode("utf-8", errors="replace")
        return [p for p in out.split("\0") if p]


def resolve_base(git: Git, flag: str | None, env: dict[str, str], config_ref: str | None,
                 env_var: str = "ROWGATE_BASE", remote: str | None = None,
                 head: str = "HEAD") -> BaseRange:
    """Resolve a range's base, in precedence order: flag, environment, config, detected upstream.
    The range starts at the merge base of base and head."""
    for ref, source in ((flag, "--base"), (env.get(env_var), f"${env_var}"), (config_ref, "config base.ref")):
        if ref:
            break
    else:
        ref, source = git.default_upstream(remote), "detected upstream"
        if ref is None:
            raise GitError("no base given and no upstream detected",
                           hint=f"pass --base REF, set ${env_var}, or set base.ref in .agents/config.yaml")
    base_sha = git.must_resolve(ref, "base")
    head_sha = git.must_resolve(head, "head")
    return BaseRange(ref, source, base_sha, head_sha, git.merge_base(base_sha, head_sha))
