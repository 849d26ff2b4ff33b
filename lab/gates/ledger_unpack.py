"""Copy the ledger records of a device call's results archive into the repository's ledger.

    python -m lab.gates.ledger_unpack records.tgz [--into .agents/ledger] [--dry-run]

A device call returns its records inside `records.tgz` (scripts/bench/device_owed.sh), often twice (a phase's own
`ledger/` folder and the call's), under names that the repository's ledger may already hold from an earlier call
(`<date>-<slug>.json`). Every `*.json` file directly inside a folder named `ledger` is a record when it parses as a
schema-2 record; each distinct one is written once, under its own name or, where that name is taken by another
record, the first free `<stem>-N.json` (write_record's scheme). A record already in the ledger byte for byte, under
any name (an earlier unpack may have renamed it), is skipped. The archive is only read: its names never choose where
a file is written, and nothing else in it is extracted.
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
from pathlib import Path, PurePosixPath

from lab.gates.ledger import free_path, repo_root

MAX_RECORD_BYTES = 1 << 20  # a record is capped far below this (SIZE_CAP); a larger member is not one


def records(archive: Path) -> list[tuple[str, bytes]]:
    """(file name, bytes) of each schema-2 record in the archive, in member order, distinct by content."""
    seen: set[bytes] = set()
    found = []
    with tarfile.open(archive, "r:*") as tar:
        for member in tar:
            path = PurePosixPath(member.name)
            if not member.isfile() or path.suffix != ".json" or path.parent.name != "ledger":
                continue
            if member.size > MAX_RECORD_BYTES:
                continue
            handle = tar.extractfile(member)
            body = handle.read() if handle else b""
            if body in seen or not _is_record(body):
                continue
            seen.add(body)
            found.append((path.name, body))
    return found


def _is_record(body: bytes) -> bool:
    try:
        data = json.loads(body)
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("schema") == 2 and "commit" in data and "summary" in data


def held(into: Path) -> dict[bytes, str]:
    """The ledger's records by content: bytes -> file name."""
    return {p.read_bytes(): p.name for p in sorted(into.glob("*.json")) if p.is_file()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lab.gates.ledger_unpack", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    parser.add_argument("archive", type=Path, help="a device call's records.tgz")
    parser.add_argument("--into", type=Path, help="the ledger folder (default: the checkout's .agents/ledger)")
    parser.add_argument("--dry-run", action="store_true", help="print what would be written, write nothing")
    args = parser.parse_args(argv)
    into = args.into or (repo_root() or Path.cwd()) / ".agents" / "ledger"
    if not args.archive.is_file():
        print(f"error: {args.archive}: no such file", file=sys.stderr)
        return 2
    try:
        found = records(args.archive)
    except (tarfile.TarError, OSError) as exc:
        print(f"error: {args.archive}: not a readable archive ({exc})", file=sys.stderr)
        return 2
    if not found:
        print(f"{args.archive}: no ledger records in it")
        return 1
    into.mkdir(parents=True, exist_ok=True)
    have = held(into)
    for name, body in found:
        data = json.loads(body)
        state = "clean" if data.get("clean") else "DIRTY"
        if body in have:
            print(f"already in the ledger: {name} (as {have[body]})")
            continue
        where = free_path(into, name.removesuffix(".json"))
        if not args.dry_run:
            where.write_bytes(body)
        print(f"{'would add' if args.dry_run else 'added'} {where.name} ({str(data['commit'])[:9]}, {state}): "
              f"{str(data['summary'])[:100]}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
