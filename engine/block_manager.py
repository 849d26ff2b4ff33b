"""Pure-Python allocation of paged KV-cache blocks, per-sequence block tables, and a prefix cache.

Prefix caching: once every token of a block is in the cache, the block is registered under a hash of
its tokens chained with its predecessor's hash (so equal hashes mean equal whole prefixes). A new
sequence whose prompt starts with registered blocks shares them (reference counts) instead of
recomputing them. A freed block keeps its registration while it waits in the free pool, so a later
request can still hit it; it is evicted (oldest first) only when no block without one is free.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence


class OutOfBlocksError(RuntimeError):
    """The KV cache has no free block left for a sequence."""


class BlockManager:
    """Hands out fixed-size KV blocks; a sequence's block table maps its token i to block table[i // block_size]."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks <= 0 or block_size <= 0:
            raise ValueError(f"BlockManager: num_blocks={num_blocks} and block_size={block_size} must be positive")
        self.num_blocks = num_blocks
        self.block_size = block_size
        # popped from the end, so blocks are handed out in increasing order (easy to read in tests)
        self._free = list(range(num_blocks - 1, -1, -1))
        self._free_cached: OrderedDict[int, None] = OrderedDict()  # free but registered, oldest first
        self._refs = [0] * num_blocks
        self._hash_of: dict[int, bytes] = {}  # block -> its registered hash
        self._block_of: dict[bytes, int] = {}  # hash -> block
        # sequence -> (how many of its leading blocks are hashed, the last one's hash)
        self._hashed: dict[int, tuple[int, bytes]] = {}
        self.prefix_caching = True  # off: no block is registered, so none is shared
        self.tables: dict[int, list[int]] = {}
        self.lengths: dict[int, int] = {}

    @property
    def num_free(self) -> int:
        return len(self._free) + len(self._free_cached)

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    # --- plain allocation (a benchmark's own sequences) -------------------------------------------
    def allocate(self, seq_id: int, num_tokens: int) -> list[int]:
        """Reserve blocks for a new sequence of `num_tokens` tokens; returns its block table."""
        if seq_id in self.tables:
            raise ValueError(f"sequence {seq_id} already has blocks")
        need = self.blocks_needed(num_tokens)
        if need > self.num_free:
            raise OutOfBlocksError(
                f"sequence {seq_id} needs {need} blocks for {num_tokens} tokens, "
                f"{self.num_free} of {self.num_blocks} free"
            )
        self.tables[seq_id] = [self._take() for _ in range(need)]
        self.lengths[seq_id] = num_tokens
        return self.tables[seq_id]

    def append_token(self, seq_id: int) -> int:
        """Grow a sequence by one token, taking a new block when it crosses a boundary; returns its slot."""
        if seq_id not in self.tables:
            raise KeyError(f"sequence {seq_id} has no blocks")
        pos = self.lengths[seq_id]
        table = self.tables[seq_id]
        if pos // self.block_size >= len(table):
            if not self.num_free:
                raise OutOfBlocksError(f"sequence {seq_id} needs a block at token {pos}, 0 of {self.num_blocks} free")
            table.append(self._take())
        self.lengths[seq_id] = pos + 1
        return self.slot(seq_id, pos)

    def slot(self, seq_id: int, pos: int) -> int:
        """The flat cache slot of token `pos` of a sequence."""
        table = self.tables[seq_id]
        if not 0 <= pos < len(table) * self.block_size:
            raise IndexError(f"sequence {seq_id}: position {pos} outside its {len(table)} blocks")
        return table[pos // self.block_size] * self.block_size + pos % self.block_size

    def free(self, seq_id: int) -> None:
        """Drop a sequence's references; a block nobody references returns to the free pool."""
        for block in reversed(self.tables.pop(seq_id)):
            self._refs[block] -= 1
            if self._refs[block] == 0:
                if block in self._hash_of:
                    self._free_cached[block] = None
                else:
                    self._free.append(block)
        del self.lengths[seq_id]
        self._hashed.pop(seq_id, None)

    # --- the scheduler's allocation, with the prefix cache ------------------------------
    def allocate_prompt(
        self, seq_id: int, token_ids: Sequence[int], first_chunk: int, lookup: bool = True
    ) -> int | None:
        """Give a new sequence its cached prefix blocks plus fresh blocks for its first `first_chunk`
        uncached tokens; returns how many leading tokens are already cached, or None (and changes
        nothing) when the free pool is too small. The last token is never taken from the cache: its
        logits are needed. lookup=False takes nothing from the cache (a request whose every prompt
        position must be computed: prompt logprobs)."""
        if seq_id in self.tables:
            raise ValueError(f"sequence {seq_id} already has blocks")
        hits, parent = self._lookup(token_ids) if lookup else ([], b"")
        cached = len(hits) * self.block_size
        need = self.blocks_needed(cached + first_chunk) - len(hits)
        revived = sum(1 for b in hits if self._refs[b] == 0)
        if need + revived > self.num_free:
            return None
        for b in hits:
            if self._refs[b] == 0:
                del self._free_cached[b]
            self._refs[b] += 1
        self.tables[seq_id] = hits + [self._take() for _ in range(need)]
        self.lengths[seq_id] = cached + first_chunk
        self._hashed[seq_id] = (len(hits), parent)
        return cached

    def grow(self, seq_id: int, num_tokens: int) -> bool:
        """Make a sequence's table cover `num_tokens` tokens; False (nothing taken) if the pool is short."""
        table = self.tables[seq_id]
        need = self.blocks_needed(num_tokens) - len(table)
        if need > self.num_free:
            return False
        table.extend(self._take() for _ in range(need))
        self.lengths[seq_id] = max(self.lengths[seq_id], num_tokens)
        return True

    def mark_computed(self, seq_id: int, token_ids: Sequence[int], num_computed: int) -> None:
        """Register every block of the sequence whose tokens are all in the cache now."""
        if not self.prefix_caching:
            return
        table, bs = self.tables[seq_id], self.block_size
        done, parent = self._hashed.get(seq_id, (0, b""))
        full = min(num_computed // bs, len(table))
        for i in range(done, full):
            h = block_hash(parent, token_ids[i * bs : (i + 1) * bs])
            block = table[i]
            if h not in self._block_of and block not in self._hash_of:
                self._block_of[h] = block
                self._hash_of[block] = h
            parent = h
        if full > done:
            self._hashed[seq_id] = (full, parent)

    def check_empty(self) -> None:
        """Raise if any block is still held: after every request ended, all must be free."""
        held = [b for b, r in enumerate(self._refs) if r]
        if held or self.tables or self.num_free != self.num_blocks:
            raise AssertionError(
                f"leaked blocks: {held[:16]} held, sequences {sorted(self.tables)[:16]} "
                f"still have tables, {self.num_free} of {self.num_blocks} free"
            )

    def _lookup(self, token_ids: Sequence[int]) -> tuple[list[int], bytes]:
        bs, hits, parent = self.block_size, [], b""
        for i in range((len(token_ids) - 1) // bs):  # full blocks before the last token
            h = block_hash(parent, token_ids[i * bs : (i + 1) * bs])
            block = self._block_of.get(h)
            if block is None:
                break
            hits.append(block)
            parent = h
        return hits, parent

    def _take(self) -> int:
        if self._free:
            block = self._free.pop()
        else:  # evict the oldest registered free block
            block, _ = self._free_cached.popitem(last=False)
            del self._block_of[self._hash_of.pop(block)]
        self._refs[block] = 1
        return block


def block_hash(parent: bytes, tokens: Sequence[int]) -> bytes:
    """The hash of a full block: its tokens, chained with the hash of the blocks before it."""
    h = hashlib.blake2b(parent, digest_size=16)
    h.update(b"".join(int(t).to_bytes(4, "little", signed=True) for t in tokens))
    return h.digest()
