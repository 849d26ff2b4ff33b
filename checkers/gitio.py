"""All git access: discovery, refs, merge bases and batched reads, each call with a timeout, no shell,
and no user or system git config (it changes trailer parsing and output formats)."""

from __future__ import annotations

import os
import re
import selectors
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple, TypeVar, cast

from .results import CheckError

DEFAULT_TIMEOUT_S = 60.0
# The empty tree (SHA-1): the base of a range that starts at the root, e.g. a first push to an empty remote.
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
# Settings a repository's own config could use to change what rowgate parses: every call overrides them
# (user and system config are not read at all). Trailer parsing, log and diff output shape, encodings,
# path quoting, and every program-valued key with a fixed name (a repository's config is a branch's
# content: no program it names may run). Keys whose names the repository chooses (filter, diff and merge
# drivers) are neutralised per repository (Git._driver_overrides).
CONFIG_OVERRIDES = (
    "trailer.separators=:",
    "trailer.where=end",
    "trailer.ifexists=addIfDifferentNeighbor",
    "trailer.ifmissing=add",
    "log.showSignature=false",
    "log.mailmap=false",
    "log.decorate=false",
    "log.abbrevCommit=false",
    "log.follow=false",
    "log.showRoot=true",
    "log.date=default",
    "i18n.logOutputEncoding=UTF-8",
    "i18n.commitEncoding=UTF-8",
    "core.quotePath=false",
    "core.fsmonitor=false",
    "core.hooksPath=/dev/null",
    "core.pager=cat",
    "core.askPass=",
    "core.sshCommand=",
    "core.editor=:",
    "core.alternateRefsCommand=",
    "sequence.editor=:",
    "diff.external=",
    "credential.helper=",
    "gpg.program=false",
    "protocol.allow=never",
    "uploadpack.packObjectsHook=",
    "diff.noprefix=false",
    "diff.mnemonicPrefix=false",
    "diff.relative=false",
    "diff.renames=true",
    "color.ui=false",
    "notes.displayRef=",
)
_CONFIG_ARGS = tuple(a for kv in CONFIG_OVERRIDES for a in ("-c", kv))
# Driver keys that name a program, by section: `<section>.<driver>.<key>`, the driver named by the repository.
_DRIVER_PROGRAMS = {"filter": ("clean", "smudge", "process"), "diff": ("textconv", "command"), "merge": ("driver",)}
# What locates a repository from the environment: honoured only when no --repo was given and nothing else
# finds one (a hook run with GIT_DIR set outside its work tree).
_LOCATORS = ("GIT_DIR", "GIT_WORK_TREE", "GIT_COMMON_DIR")
_located_by_env: dict[str, dict[str, str]] = {}  # work tree root -> the locators that found it
_discovered: dict[str, Path] = {}  # work tree root -> its git directory, as discovery found it


class GitError(CheckError):
    """A git call that failed in a way the user can fix; the message says what, the hint how."""


def git_env(locators: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of every git call: the caller's, without any GIT_* variable (they could point git at
    another repository, inject config or change output), plus a fixed set of our own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_TERMINAL_PROMPT="0",
        GIT_OPTIONAL_LOCKS="0",
        GIT_NO_REPLACE_OBJECTS="1",
        GIT_NO_LAZY_FETCH="1",
        LC_ALL="C",
        LANG="C",
    )
    env.update(locators or {})
    return env


def git_command(*args: str) -> list[str]:
    """`git` with the parsing overrides, then `args`."""
    return ["git", *_CONFIG_ARGS, *args]


def discover(start: Path, explicit: bool = True) -> Path:
    """The work tree root containing `start`."""
    return discover_repo(start, explicit)[0]


def discover_repo(start: Path, explicit: bool = False) -> tuple[Path, Path]:
    """The work tree root containing `start`, and its git directory (where rowgate keeps its caches).
    GIT_DIR and GIT_WORK_TREE are ignored, except when the repository was not `explicit` (no --repo)
    and they are the only thing that locates it.

    One `git rev-parse` rather than GitPython: importing GitPython costs about 0.25 s, twice the
    `git log` of a 10,000-commit range, and every check starts here (and GitPython reads the user's config
    and can run its fsmonitor program)."""
    if not Path(start).is_dir():
        raise GitError(f"{start} is not a directory", hint="pass --repo PATH of a git work tree")
    proc = _rev_parse_toplevel(start, None)
    if proc.returncode != 0 and not explicit and os.environ.get("GIT_DIR"):
        locators = {k: str(Path(start, os.environ[k]).resolve()) for k in _LOCATORS if os.environ.get(k)}
        proc = _rev_parse_toplevel(start, locators)
        if proc.returncode == 0:
            out = proc.stdout.decode().split("\n")
            if len(out) >= 3 and out[1]:
                _located_by_env[str(Path(out[1]))] = locators
    out = proc.stdout.decode("utf-8", errors="surrogateescape").split("\n")
    if proc.returncode != 0:
        raise GitError(
            f"{start} is not inside a git repository", hint="run rowgate from a git work tree, or pass --repo PATH"
        )
    if out[0] == "true" or len(out) < 3 or not out[1]:
        raise GitError(f"{start} is in a bare repository", hint="run rowgate in a work tree")
    if len(out) != 4:  # a path holds a newline: ask for each alone, so its one line is the whole output
        out = [out[0], _rev_parse_one(start, "--show-toplevel"), _rev_parse_one(start, "--absolute-git-dir")]
    root, git_dir = Path(out[1]), Path(out[2])
    _discovered[str(root)] = git_dir
    return root, git_dir


def git_dir_of(root: Path) -> Path | None:
    """The git directory of the work tree `root` (where rowgate keeps its caches), as discovery found it,
    else asked of git; None where `root` is no work tree's root."""
    known = _discovered.get(str(root))
    if known is not None:
        return known
    try:
        found, git_dir = discover_repo(root, explicit=True)
    except GitError:
        return None
    return git_dir if Path(os.path.realpath(found)) == Path(os.path.realpath(root)) else None


def _rev_parse_one(start: Path, option: str) -> str:
    """One path from `git rev-parse OPTION`, exactly: the output less its final newline (a newline inside
    the path stays; cutting at the first one would name a neighbour directory)."""
    locators = _located_by_env.get(str(start))
    proc = subprocess.run(
        git_command("rev-parse", option),
        cwd=start,
        capture_output=True,
        env=git_env(locators),
        timeout=DEFAULT_TIMEOUT_S,
        check=False,
    )
    text = proc.stdout.decode("utf-8", errors="surrogateescape")
    return text[:-1] if text.endswith("\n") else text


def _rev_parse_toplevel(start: Path, locators: dict[str, str] | None) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(
            git_command("rev-parse", "--is-bare-repository", "--show-toplevel", "--absolute-git-dir"),
            cwd=start,
            capture_output=True,
            env=git_env(locators),
            timeout=DEFAULT_TIMEOUT_S,
            check=False,
        )
    except FileNotFoundError:
        raise GitError("git is not installed or not on PATH", hint="install git 2.30 or newer") from None
    except subprocess.TimeoutExpired:
        raise GitError(
            f"git rev-parse in {start} timed out after {DEFAULT_TIMEOUT_S:.0f}s",
            hint="check the repository for a stuck lock or a slow file system",
        ) from None


T = TypeVar("T")


# The records below are named tuples rather than frozen dataclasses: a range builds thousands of commits,
# which a named tuple makes several times faster, and every check starts without importing `dataclasses`.
class Commit(NamedTuple):
    """One commit of a range."""

    sha: str
    parents: tuple[str, ...] | None  # None when not read (Git.range_commits)
    author_name: str | None
    author_email: str | None
    message: str

    @property
    def short(self) -> str:
        return self.sha[:12]

    @property
    def parent_shas(self) -> tuple[str, ...]:
        """The parents, for a commit read with them (Git.commits and commits_with_trailers always are)."""
        if self.parents is None:
            raise ValueError(f"commit {self.short} was read without its parents (Git.range_commits(parents=True))")
        return self.parents

    @property
    def is_merge(self) -> bool:
        return len(self.parent_shas) > 1


class TrailedCommit(NamedTuple):
    """A commit with the values of the trailers that were asked for (as `git log` parses them without
    config)."""

    commit: Commit
    trailers: dict[str, tuple[str, ...]]
    time: int  # committer time, seconds since the epoch

    @property
    def rows(self) -> tuple[str, ...]:
        return self.trailers.get("Row", ())


def driver_overrides(config_list: bytes) -> dict[str, str]:
    """From `git config --list -z`, every program-valued driver key the config defines (a filter's clean,
    smudge and process, a diff driver's textconv and command, a merge driver), set empty (git then runs
    nothing), and each filter made optional, so the file passes through unfiltered instead of failing."""
    out: dict[str, str] = {}
    for entry in config_list.decode("utf-8", errors="surrogateescape").split("\0"):
        name = entry.split("\n", 1)[0]
        section, _, rest = name.partition(".")
        driver, _, key = rest.rpartition(".")
        if driver and key.lower() in _DRIVER_PROGRAMS.get(section.lower(), ()):
            out[f"{section}.{driver}.{key}"] = ""
            if section.lower() == "filter":
                out[f"{section}.{driver}.required"] = "false"
    return out


def _config_env(overrides: dict[str, str]) -> dict[str, str]:
    """`overrides` as GIT_CONFIG_COUNT/KEY_n/VALUE_n: unlike `-c`, a key may hold `=` or any byte."""
    env = {"GIT_CONFIG_COUNT": str(len(overrides))}
    for i, (key, value) in enumerate(overrides.items()):
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    return env


class Git:
    def __init__(self, root: Path, timeout_s: float = DEFAULT_TIMEOUT_S):
        self.root = Path(root)
        self.timeout_s = timeout_s
        self._base_env = git_env(_located_by_env.get(str(self.root)))
        self._env_ready: dict[str, str] | None = None
        # Where .mailmap is read from for the mapped reads (`mailmap=True`, check_mailmap): None for the work
        # tree's, or a commit (the base of a range) whose .mailmap blob alone is used, so a branch's own
        # .mailmap change cannot map its identities (it takes effect once it is on the base).
        self.mailmap_rev: str | None = None
        self._frozen: dict[tuple[str, ...], Any] | None = None  # freeze_refs(): remembered answers

    def _mailmap_opts(self) -> tuple[str, ...]:
        """Global options that make git read .mailmap only from `mailmap_rev`'s tree: run in the git
        directory with it named, git finds no work-tree .mailmap (it looks in the current directory, where
        no checkout writes one), and mailmap.blob names the base's."""
        if self.mailmap_rev is None:
            return ()
        git_dir = _discovered.get(str(self.root))
        if git_dir is None:
            git_dir = Path(self.text("rev-parse", "--absolute-git-dir").strip())
        blob = "" if self.mailmap_rev == EMPTY_TREE else f"{self.mailmap_rev}:.mailmap"
        return ("-C", str(git_dir), "--git-dir", str(git_dir), "-c", f"mailmap.blob={blob}", "-c", "mailmap.file=")

    @property
    def _env(self) -> dict[str, str]:
        """The environment of this repository's git calls: git_env() plus the repository's own driver
        programs switched off (one `git config --list` the first time)."""
        if self._env_ready is None:
            try:
                listed = subprocess.run(
                    git_command("-C", str(self.root), "config", "--list", "-z"),
                    capture_output=True,
                    env=self._base_env,
                    timeout=self.timeout_s,
                    check=False,
                ).stdout
            except (OSError, subprocess.TimeoutExpired):
                listed = b""  # the call that needs git reports the failure
            self._env_ready = {**self._base_env, **_config_env(driver_overrides(listed))}
        return self._env_ready

    def run(
        self, *args: str, input: bytes | None = None, ok_codes: tuple[int, ...] = (0,), timeout_s: float | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        cmd = git_command("-C", str(self.root), *args)
        try:
            proc = subprocess.run(
                cmd, input=input, capture_output=True, env=self._env, timeout=timeout_s or self.timeout_s, check=False
            )
        except subprocess.TimeoutExpired:
            raise GitError(
                f"git {' '.join(args)} timed out after {timeout_s or self.timeout_s:.0f}s",
                hint="check the repository for a stuck lock or a huge range",
            ) from None
        except FileNotFoundError:
            raise GitError("git is not installed or not on PATH", hint="install git 2.30 or newer") from None
        if proc.returncode not in ok_codes:
            err = proc.stderr.decode(errors="replace").strip().splitlines()
            raise GitError(f"git {' '.join(args)} failed: {err[-1] if err else f'exit {proc.returncode}'}")
        return proc

    def records(self, *args: str, chunk: int = 1 << 16) -> Iterator[str]:
        """The NUL-ended records of `git ARGS` (which must write `-z` output), decoded with surrogate
        escapes, each as soon as git has written it: the caller's work on one record overlaps git's on the
        next, where run() would wait for the whole output first. Failures and the timeout (over the whole
        read) raise as run() raises them, after the records read so far; a caller that stops early stops
        git."""
        cmd = git_command("-C", str(self.root), *args)
        try:
            proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self._env
            )
        except FileNotFoundError:
            raise GitError("git is not installed or not on PATH", hint="install git 2.30 or newer") from None
        assert proc.stdout is not None and proc.stderr is not None
        deadline = time.monotonic() + self.timeout_s
        err: list[bytes] = []
        pieces: list[bytes] = []  # the record being read, in pieces: joined once, so a huge one costs its size
        try:
            with selectors.DefaultSelector() as sel:
                sel.register(proc.stdout, selectors.EVENT_READ)
                sel.register(proc.stderr, selectors.EVENT_READ)
                while sel.get_map():
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise GitError(
                            f"git {' '.join(args)} timed out after {self.timeout_s:.0f}s",
                            hint="check the repository for a stuck lock or a huge range",
                        )
                    for key, _ in sel.select(left):
                        data = os.read(key.fd, chunk)
                        if not data:
                            sel.unregister(key.fileobj)
                        elif key.fileobj is proc.stderr:
                            err.append(data)
                        else:
                            cut = data.rfind(b"\0")
                            if cut < 0:
                                pieces.append(data)
                                continue
                            pieces.append(data[:cut])
                            text = b"".join(pieces).decode("utf-8", errors="surrogateescape")
                            pieces = [data[cut + 1 :]]
                            yield from text.split("\0")
            try:
                code = proc.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                raise GitError(
                    f"git {' '.join(args)} timed out after {self.timeout_s:.0f}s",
                    hint="check the repository for a stuck lock or a huge range",
                ) from None
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()
            proc.stderr.close()
        tail = b"".join(pieces)
        if tail:
            yield tail.decode("utf-8", errors="surrogateescape")  # output that does not end with a NUL
        if code != 0:
            lines = b"".join(err).decode(errors="replace").strip().splitlines()
            raise GitError(f"git {' '.join(args)} failed: {lines[-1] if lines else f'exit {code}'}")

    def text(self, *args: str, **kw: Any) -> str:
        return self.run(*args, **kw).stdout.decode("utf-8", errors="replace")

    # --- refs ----------------------------------------------------------------
    def freeze_refs(self) -> None:
        """From now on, answer each ref and ancestry question (resolve, ambiguous, current_branch, is_shallow,
        merge_base, is_ancestor, remotes) once and remember it: for a read-only run such as the preflight,
        whose checks each resolve the same `main`, `HEAD` and merge base. Nothing may move a ref after."""
        self._frozen = {}

    def _memo(self, key: tuple[str, ...], answer: Callable[[], T]) -> T:
        if self._frozen is None:
            return answer()
        if key not in self._frozen:
            self._frozen[key] = answer()
        return cast(T, self._frozen[key])

    def resolve(self, ref: str) -> str | None:
        return self._memo(("resolve", ref), lambda: self._resolve(ref))

    def _resolve(self, ref: str) -> str | None:
        proc = self.run(
            "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}", ok_codes=(0, 1, 128)
        )
        return proc.stdout.decode().strip() or None if proc.returncode == 0 else None

    def must_resolve(self, ref: str, what: str = "ref") -> str:
        """The commit `ref` names; a name that is both a branch and a tag (or a remote-tracking ref) is an
        error naming each, never silently one of them as git's rev-parse would pick."""
        both = self.ambiguous(ref)
        if len(both) > 1:
            raise GitError(
                f"{what} {ref!r} is ambiguous: it names {' and '.join(both)}",
                hint=f"write the full ref name, e.g. {both[0]}",
            )
        sha = self.resolve(ref)
        if sha is None:
            hint = f"fetch it (git fetch origin {ref.split('/', 1)[-1]}) or pass another --base"
            if self.is_shallow():
                hint = "this is a shallow clone: run git fetch --unshallow (CI: fetch-depth: 0)"
            raise GitError(f"{what} {ref!r} does not resolve to a commit", hint=hint)
        return sha

    def ambiguous(self, ref: str) -> list[str]:
        """The full ref names a short name (the part before any `~^:@{`) stands for among branches, tags and
        remote-tracking refs; one git call, none for a full ref name or a hex object name."""
        return self._memo(("ambiguous", ref), lambda: self._ambiguous(ref))

    def _ambiguous(self, ref: str) -> list[str]:
        name = re.match(r"[^~^:@{]*", ref).group(0)  # type: ignore[union-attr]
        if not name or name.startswith("refs/") or name == "HEAD" or re.fullmatch(r"[0-9a-f]{4,64}", name):
            return []
        wanted = [f"refs/heads/{name}", f"refs/tags/{name}", f"refs/remotes/{name}"]
        out = self.text("for-each-ref", "--format=%(refname)", *wanted).split("\n")
        return [r for r in wanted if r in out]

    def is_shallow(self) -> bool:
        return self._memo(("is_shallow",), self._is_shallow)

    def _is_shallow(self) -> bool:
        return self.text("rev-parse", "--is-shallow-repository").strip() == "true"

    def require_complete_history(self, rev_range: str) -> None:
        """Raise GitError when a shallow or grafted boundary lies inside `rev_range`: the commits behind it
        are missing, so a check of the range would judge only part of it (and could pass on that part)."""
        cuts = set()
        for path in self.graft_files():
            try:
                lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
            except (FileNotFoundError, NotADirectoryError):
                continue
            cuts |= {line.split()[0] for line in lines if line.strip() and not line.startswith("#")}
        if not cuts:
            return
        inside = cuts & set(self.rev_list(rev_range))
        if inside:
            first = sorted(inside)[0]
            kind = "shallow" if self.is_shallow() else "grafted"
            raise GitError(
                f"the range {_short_range(rev_range)} crosses the {kind} boundary at {first[:12]}: "
                "the history behind it is missing, so the range cannot be verified",
                hint="run git fetch --unshallow (CI: fetch-depth: 0)",
            )

    def graft_files(self) -> list[Path]:
        """The shallow and grafts files (`git rev-parse --git-path shallow --git-path info/grafts`). Both
        live in the common git directory: for a repository that discovery found by itself, that is its
        git directory, or the one a linked work tree's `commondir` names, with no git process; else git
        says."""
        git_dir = _discovered.get(str(self.root))
        if git_dir is not None and str(self.root) not in _located_by_env:
            try:
                common = git_dir / (git_dir / "commondir").read_text(encoding="utf-8").strip()
            except FileNotFoundError:
                common = git_dir
            except (OSError, UnicodeDecodeError):
                common = None
            if common is not None:
                return [common / "shallow", common / "info" / "grafts"]
        files = self.text("rev-parse", "--git-path", "shallow", "--git-path", "info/grafts").splitlines()
        return [Path(self.root, name.strip()) for name in files]

    def merge_base(self, a: str, b: str) -> str:
        return self._memo(("merge_base", a, b), lambda: self._merge_base(a, b))

    def _merge_base(self, a: str, b: str) -> str:
        proc = self.run("merge-base", a, b, ok_codes=(0, 1))
        if proc.returncode == 1:
            if self.is_shallow():
                raise GitError(
                    f"no merge base between {a[:12]} and {b[:12]} in this shallow clone",
                    hint="run git fetch --unshallow (CI: fetch-depth: 0)",
                )
            raise GitError(
                f"{a[:12]} and {b[:12]} have unrelated histories (no merge base)",
                hint="pass a --base that shares history with HEAD",
            )
        return proc.stdout.decode().strip()

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        return self._memo(("is_ancestor", ancestor, descendant), lambda: self._is_ancestor(ancestor, descendant))

    def _is_ancestor(self, ancestor: str, descendant: str) -> bool:
        return self.run("merge-base", "--is-ancestor", ancestor, descendant, ok_codes=(0, 1)).returncode == 0

    def ancestors_among(self, commits: Sequence[str], descendant: str) -> set[str]:
        """Those of `commits` (full names of existing commits) that are ancestors of `descendant` (or it), in
        one `git rev-list`: what it lists is reachable from the commits but not from `descendant`, so a
        commit it does not list is an ancestor."""
        if not commits:
            return set()
        revs = "".join(f"{c}\n" for c in commits) + f"^{descendant}\n"
        outside = set(self.text("rev-list", "--stdin", input=revs.encode()).split())
        return {c for c in commits if c not in outside}

    def remotes(self) -> list[str]:
        return self._memo(("remotes",), lambda: self.text("remote").split())

    def current_branch(self) -> str | None:
        return self._memo(("current_branch",), self._current_branch)

    def _current_branch(self) -> str | None:
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
    def commits(self, rev_range: str, first_parent: bool = False, mailmap: bool = False) -> list[Commit]:
        """Every commit in `rev_range`, oldest first, read by one `git log`. The message is the raw `%B`;
        `mailmap` maps the author through .mailmap (`%aN`, `%aE`)."""
        author = "%aN%x1f%aE" if mailmap else "%an%x1f%ae"
        args = [*(self._mailmap_opts() if mailmap else ()), "log", "-z", "--reverse"]
        args.append(f"--format=%H%x1f%P%x1f{author}%x1f%B")
        if first_parent:
            args.append("--first-parent")
        # Raw bytes kept (surrogate escapes, never replacement characters), so identities compare as stored.
        out = self.run(*args, rev_range, "--").stdout.decode("utf-8", errors="surrogateescape")
        commits = []
        for record in out.split("\0"):
            if not record:
                continue
            sha, parents, name, email, message = record.split("\x1f", 4)
            commits.append(Commit(sha.strip(), tuple(parents.split()), name, email, message))
        return commits

    def range_commits(
        self, base: str, head: str, mailmap: bool = False, parents: bool = True, authors: bool = True
    ) -> tuple[str, list[Commit]]:
        """The merge base of two commits and the commits of merge_base..head, oldest first (range_read
        without a per-message function)."""
        merge_base, commits, _ = self.range_read(base, head, ignore_message, mailmap, parents, authors)
        return merge_base, commits

    def range_read(
        self,
        base: str,
        head: str,
        read: Callable[[str], T],
        mailmap: bool = False,
        parents: bool = True,
        authors: bool = True,
    ) -> tuple[str, list[Commit], list[T]]:
        """The merge base of two commits, the commits of merge_base..head, oldest first, and `read` of each
        commit's message, called while git still writes the log (Git.records).

        One `git log --boundary base..head` usually answers both: when the log has exactly one boundary
        commit (an excluded parent of a commit in the range), every common ancestor of base and head lies
        behind it, so it is the one merge base and base..head is merge_base..head. That saves the walk
        `git merge-base` repeats, as long as the log's own in a repository without a commit-graph.
        Otherwise `git merge-base` decides (and raises on unrelated histories or a shallow cut).

        `parents=False` or `authors=False` leave those fields None: each costs git about a tenth more
        time over a long range, and most contracts need neither."""
        fields = ["%m%H"] + ["%P"] * parents + ["%aN%x1f%aE" if mailmap else "%an%x1f%ae"] * authors
        n = 1 + parents + 2 * authors  # fields before the message
        spec = head if base == EMPTY_TREE else f"{base}..{head}"  # from the root: every commit of head
        commits: list[Commit] = []
        read_out: list[T] = []
        boundary = []
        add, add_read = commits.append, read_out.append
        new = tuple.__new__  # Commit(...) without its Python-level __new__: this loop runs once per commit
        mm = self._mailmap_opts() if mailmap and authors else ()
        for record in self.records(
            *mm, "log", "-z", "--reverse", "--boundary", f"--format={'%x1f'.join(fields)}%x1f%B", spec, "--"
        ):
            if not record:
                continue
            meta = record.split("\x1f", n)
            if meta[0][0] == "-":  # %m: `-` marks a boundary commit, `>` one in the range
                boundary.append(meta[0][1:].strip())
                continue
            message = meta[n]
            add(
                new(
                    Commit,
                    (
                        meta[0][1:].strip(),
                        tuple(meta[1].split()) if parents else None,
                        meta[n - 2] if authors else None,
                        meta[n - 1] if authors else None,
                        message,
                    ),
                )
            )
            add_read(read(message))
        if base == EMPTY_TREE:
            return base, commits, read_out
        if not commits:
            return head, commits, read_out  # head is reachable from base, so it is the merge base
        if len(boundary) == 1:
            return boundary[0], commits, read_out
        bases = self.run("merge-base", "--all", base, head, ok_codes=(0, 1)).stdout.decode().split()
        if len(bases) == 1:
            return bases[0], commits, read_out  # the one merge base: base..head is merge_base..head
        merge_base = self.merge_base(base, head)  # none (raises), or criss-cross: git's pick, as before
        commits = self.commits(f"{merge_base}..{head}", mailmap=mailmap)
        return merge_base, commits, [read(c.message) for c in commits]

    def unpushed_base(self, head: str, remote: str) -> str | None:
        """Where the commits of `head` that `remote` lacks start: the one commit they grow from, EMPTY_TREE
        when the remote has none of head's history (an empty remote), None when they grow from several."""
        out = self.text("rev-list", "--boundary", head, "--not", f"--remotes={remote}", "--").split()
        boundary = {line[1:] for line in out if line[:1] == "-"}
        if not boundary:
            return EMPTY_TREE
        return boundary.pop() if len(boundary) == 1 else None

    def rev_list(self, rev_range: str) -> list[str]:
        """The shas in `rev_range` (one `git rev-list`)."""
        return self.text("rev-list", rev_range, "--").split()

    def check_mailmap(self, contacts: list[str], batch: int = 500) -> dict[str, str]:
        """Map `Name <email>` contacts through .mailmap: one `git check-mailmap` per `batch` distinct
        contacts (one for any usual range)."""
        contacts = sorted({c for c in contacts if "<" in c and c.rstrip().endswith(">")})
        mapped: dict[str, str] = {}
        for i in range(0, len(contacts), batch):
            chunk = contacts[i : i + batch]
            raw = self.run(*self._mailmap_opts(), "check-mailmap", "--", *chunk).stdout.decode(
                "utf-8", errors="surrogateescape"
            )
            out = raw.split("\n")[:-1] if raw.endswith("\n") else raw.split("\n")
            if len(out) == len(chunk):
                mapped.update(zip(chunk, out))
        return mapped

    def ls_files(self) -> list[str]:
        out = self.run("ls-files", "-z").stdout.decode("utf-8", errors="replace")
        return [p for p in out.split("\0") if p]

    # --- pr-size reads -------------------------------------------------------
    def numstat(self, base: str, head: str, renames: bool = True) -> list[DiffStat]:
        """Changed files between two commits, in one `git diff --numstat -z` (renames found at git's
        default 50% similarity when `renames`; otherwise a rename is a delete plus an add)."""
        args = [
            "diff",
            "--numstat",
            "-z",
            "--no-ext-diff",
            "--no-textconv",
            "--no-color",
            "--find-renames" if renames else "--no-renames",
            base,
            head,
            "--",
        ]
        return parse_numstat_z(self.run(*args).stdout)

    def attr_set(self, paths: list[str], attr: str, rev: str | None = None) -> set[str]:
        """The paths whose attribute `attr` is set or true, from one `git check-attr --stdin -z` call:
        attributes as the work tree's .gitattributes declare them, or with `rev` as that commit's do (a
        temporary index of its tree, never the work tree: a branch's own .gitattributes cannot speak for
        the base)."""
        if not paths:
            return set()
        data = "\0".join(paths).encode("utf-8", errors="surrogateescape") + b"\0"
        if rev is None:
            out = self.run("check-attr", "--stdin", "-z", attr, input=data).stdout
        else:
            import tempfile

            with tempfile.TemporaryDirectory(prefix="rowgate-attr-") as tmp:
                index = os.path.join(tmp, "index")
                self.run("read-tree", f"--index-output={index}", rev)
                env = {**self._env, "GIT_INDEX_FILE": index}
                try:
                    out = subprocess.run(
                        git_command("-C", str(self.root), "check-attr", "--cached", "--stdin", "-z", attr),
                        input=data,
                        capture_output=True,
                        env=env,
                        timeout=self.timeout_s,
                        check=True,
                    ).stdout
                except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
                    raise GitError(f"git check-attr --cached at {rev[:12]} failed: {exc}") from None
        fields = out.decode("utf-8", errors="surrogateescape").split("\0")
        return {fields[i] for i in range(0, len(fields) - 2, 3) if fields[i + 2] in ("set", "true")}

    def changes(self, a: str, b: str, path: str) -> bool:
        """Whether `path` differs between commits `a` and `b` (trees compared; no content is diffed)."""
        return self.run("diff-tree", "--quiet", a, b, "--", path, ok_codes=(0, 1)).returncode == 1

    def blob_sizes(self, specs: list[str]) -> dict[str, int | None]:
        """Byte sizes of `REV:PATH` blobs from one `git cat-file --batch-check` (None when missing)."""
        usable = [s for s in specs if "\n" not in s]
        if not usable:
            return {s: None for s in specs}
        out = self.run("cat-file", "--batch-check=%(objectsize)", input=("\n".join(usable) + "\n").encode()).stdout
        sizes: dict[str, int | None] = {s: None for s in specs}
        for spec, line in zip(usable, out.decode(errors="replace").splitlines()):
            sizes[spec] = int(line) if line.isdigit() else None
        return sizes

    def tree_paths(self, rev: str) -> list[str]:
        """Every file path in the tree of `rev`, from one `git ls-tree -r -z`."""
        out = self.run("ls-tree", "-r", "-z", "--name-only", "--full-tree", rev).stdout
        return [p for p in out.decode("utf-8", errors="surrogateescape").split("\0") if p]

    # --- batched reads for the record checks (agent-record, doc-checkpoint, live-rows, role-discipline)
    def commits_with_trailers(
        self, rev_range: str, keys: tuple[str, ...] = ("Row",), first_parent: bool = False, extra: tuple[str, ...] = ()
    ) -> list[TrailedCommit]:
        """Every commit in `rev_range`, oldest first, with the values of the trailers `keys` (unfolded;
        keys compare case-insensitively) and the committer time, read by one `git log`.

        The trailers come from rowgate's parser of the raw message (checkers.trailers.parser, the rules of
        `git log --format=%(trailers)` under git's default config), not from git's `%(trailers)`: git
        applies the repository's `trailer.<name>.key` aliases there (and a `trailer.<name>.*` key makes
        its paragraph a trailer block), which no `-c` override can remove."""
        from .trailers.parser import commit_trailers

        args = ["log", "-z", "--reverse", "--format=%H%x1f%P%x1f%an%x1f%ae%x1f%ct%x1f%B"]
        if first_parent:
            args.append("--first-parent")
        out = self.run(*args, *extra, rev_range, "--").stdout.decode("utf-8", errors="replace")
        result = []
        wanted = {k.lower(): k for k in keys}
        for record in out.split("\0"):
            if not record:
                continue
            sha, parents, name, email, ctime, message = record.split("\x1f", 5)
            trailers: dict[str, tuple[str, ...]] = {k: () for k in keys}
            for t in commit_trailers(message).trailers:
                k = wanted.get(t.key.lower())
                if k is not None and t.value:
                    trailers[k] = (*trailers[k], t.value)
            commit = Commit(sha.strip(), tuple(parents.split()), name, email, message)
            result.append(TrailedCommit(commit, trailers, int(ctime)))
        return result

    def changed_paths(self, rev_range: str) -> dict[str, list[str]]:
        """Paths each non-merge commit in `rev_range` changes (renames as delete plus add), one `git log`.

        Read NUL-separated only: each commit is `\\0SHA\\0` (an empty field, which no path can be, then
        the sha), then its paths, each ended by NUL, so a name holding any other byte (a newline, \\x01)
        stays one path."""
        out = self.run("log", "-z", "--no-renames", "--format=%x00%H", "--name-only", rev_range, "--").stdout.decode(
            "utf-8", errors="surrogateescape"
        )
        return _changed_paths(out)

    def changed_paths_of(self, shas: Sequence[str]) -> dict[str, list[str]]:
        """changed_paths() of exactly the commits `shas` (full names), one `git log --no-walk --stdin`."""
        if not shas:
            return {}
        out = self.run(
            "log",
            "-z",
            "--no-renames",
            "--format=%x00%H",
            "--name-only",
            "--no-walk",
            "--stdin",
            "--",
            input="".join(f"{s}\n" for s in shas).encode(),
        ).stdout.decode("utf-8", errors="surrogateescape")
        return _changed_paths(out)

    def key_changes(
        self, rev_range: str, directory: str, key: str, cap: int = 1 << 20
    ) -> dict[str, dict[str, tuple[str | None, str | None]]]:
        """Per commit, the YAML files under `directory` whose top-level `key` changed: path -> (old, new);
        a created file has old None, a deleted one new None.

        Read from the blobs, never from diff text: `.gitattributes` (`binary`, a textconv driver) changes
        what `git log -p` prints, and so what a diff parser sees; a blob is what was committed. One
        `git log --raw` for the blob ids of the range, then one `git cat-file --batch` for the blobs up to
        `cap` bytes (a larger one counts as having no value)."""
        out = self.run(
            "log", "-z", "--no-renames", "--raw", "--no-abbrev", "--format=%x00%H", rev_range, "--", directory
        ).stdout.decode("utf-8", errors="surrogateescape")
        fields = out.split("\0")
        touched: dict[str, list[tuple[str, str, str]]] = {}  # sha -> (path, old blob, new blob)
        files: list[tuple[str, str, str]] = []
        i = 0
        while i < len(fields):
            field = fields[i].lstrip("\n")
            if fields[i] == "" and i + 1 < len(fields) and _is_sha(fields[i + 1]):
                files = touched.setdefault(fields[i + 1], [])
                i += 2
                continue
            if field.startswith(":") and i + 1 < len(fields):
                meta = field[1:].split()
                if len(meta) >= 4:
                    files.append((fields[i + 1], meta[2], meta[3]))
                i += 2
                continue
            i += 1
        blobs = {b for entries in touched.values() for _, old, new in entries for b in (old, new) if set(b) != {"0"}}
        values = self._key_values(sorted(blobs), key, cap)
        result: dict[str, dict[str, tuple[str | None, str | None]]] = {}
        for sha, entries in touched.items():
            changed = {}
            for path, old, new in entries:
                before, after = values.get(old), values.get(new)
                if before != after:
                    changed[path] = (before, after)
            result[sha] = changed
        return result

    def _key_values(self, blobs: list[str], key: str, cap: int) -> dict[str, str | None]:
        """The top-level `key:` value of each blob (None when it has none or is over `cap` bytes), read by
        `git cat-file --batch-check` for the sizes and one `--batch` for the small ones (no filter runs)."""
        if not blobs:
            return {}
        sizes = self.blob_sizes(blobs)
        small = [b for b in blobs if (sizes.get(b) or 0) <= cap and sizes.get(b) is not None]
        values: dict[str, str | None] = dict.fromkeys(blobs)
        if not small:
            return values
        data = self.run("cat-file", "--batch", input=("\n".join(small) + "\n").encode()).stdout
        pos, prefix = 0, f"{key}:".encode()
        for blob in small:
            end = data.index(b"\n", pos)
            header = data[pos:end].split()
            size = int(header[2]) if len(header) == 3 and header[1] == b"blob" else 0
            body = data[end + 1 : end + 1 + size]
            pos = end + 1 + size + 1
            for line in body.split(b"\n"):
                if line.startswith(prefix):
                    text = line[len(prefix) :].decode("utf-8", errors="replace")
                    values[blob] = text.split("#", 1)[0].strip().strip("\"'")
                    break
        return values

    def refs(self, *patterns: str) -> dict[str, str]:
        """Ref name (refs/heads/..., refs/remotes/...) -> sha for the refs under `patterns`, one call."""
        out = self.text("for-each-ref", "--format=%(refname)%09%(objectname)", *patterns)
        return dict(line.split("\t", 1) for line in out.splitlines() if "\t" in line)

    def existing_commits(self, shas: list[str]) -> set[str]:
        """The subset of `shas` that name commits in this repository, one `git cat-file --batch-check`."""
        if not shas:
            return set()
        out = self.text(
            "cat-file", "--batch-check=%(objectname) %(objecttype)", input="".join(f"{s}\n" for s in shas).encode()
        )
        return {line.split()[0] for line in out.splitlines() if line.endswith(" commit")}


def _changed_paths(out: str) -> dict[str, list[str]]:
    """Parse `git log -z --format=%x00%H --name-only` output: each commit is `\\0SHA\\0`, then its paths."""
    changed: dict[str, list[str]] = {}
    fields = out.split("\0")
    paths: list[str] = []
    i = 0
    while i < len(fields):
        if fields[i] == "" and i + 1 < len(fields) and _is_sha(fields[i + 1]):
            paths = changed.setdefault(fields[i + 1], [])
            i += 2
            if i < len(fields) and fields[i].startswith("\n"):
                fields[i] = fields[i][1:]  # the newline between a commit's header and its paths
            continue
        if fields[i]:
            paths.append(fields[i])
        i += 1
    return changed


def ignore_message(message: str) -> None:
    """A progress callback that drops the message (a read nobody watches)."""
    return None


def _short_range(rev_range: str) -> str:
    return "..".join(part[:12] if _is_sha(part) else part for part in rev_range.split(".."))


def _is_sha(text: str) -> bool:
    return len(text) in (40, 64) and all(c in "0123456789abcdef" for c in text)


class DiffStat(NamedTuple):
    """One changed file of `git diff --numstat`: lines added and deleted (None for a binary file)."""

    path: str
    added: int | None
    deleted: int | None
    old_path: str | None = None  # set for a rename

    @property
    def binary(self) -> bool:
        return self.added is None


def parse_numstat_z(out: bytes) -> list[DiffStat]:
    """Parse `git diff --numstat -z`: `A\\tD\\tPATH\\0`, or `A\\tD\\t\\0OLD\\0NEW\\0` for a rename."""
    fields = out.decode("utf-8", errors="surrogateescape").split("\0")
    stats, i = [], 0
    while i < len(fields) and fields[i]:
        added, deleted, path = fields[i].split("\t", 2)
        a = None if added == "-" else int(added)
        d = None if deleted == "-" else int(deleted)
        if path:
            stats.append(DiffStat(path, a, d))
            i += 1
        else:
            stats.append(DiffStat(fields[i + 2], a, d, old_path=fields[i + 1]))
            i += 3
    return stats
