"""Pure-Python allocation of paged KV-cache blocks and per-sequence block tables."""
from __future__ import annotations


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
        self.tables: dict[int, list[int]] = {}
        self.lengths: dict[int, int] = {}

    @property
    def num_free(self) -> int:
        return len(self._free)

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def allocate(self, seq_id: int, num_tokens: int) -> list[int]:
        """Reserve blocks for a new sequence of `num_tokens` tokens; returns its block table."""
        if seq_id in self.tables:
            raise ValueError(f"sequence {seq_id} already has blocks")
        need = self.blocks_needed(num_tokens)
        if need > len(self._free):
            raise OutOfBlocksError(f"sequence {seq_id} needs {need} blocks for {num_tokens} tokens, "
                                   f"{len(self._free)} of {self.num_blocks} free")
        self.tables[seq_id] = [self._free.pop() for _ in range(need)]
        self.lengths[seq_id] = num_tokens
        return self.tables[seq_id]

    def append_token(self, seq_id: int) -> int:
        """Grow a sequence by one token, taking a new block when it crosses a boundary; returns its slot."""
        if seq_id not in self.tables:
            raise KeyError(f"sequence {seq_id} has no blocks")
        pos = self.lengths[seq_id]
        table = self.tables[seq_id]
        if pos // self.block_size >= len(table):
            if not self._free:
                raise OutOfBlocksError(f"sequence {seq_id} needs a block at token {pos}, "
                                       f"0 of {self.num_blocks} free")
            table.append(self._free.pop())
        self.lengths[seq_id] = pos + 1
        return self.slot(seq_id, pos)

    def slot(self, seq_id: int, pos: int) -> int:
        """The flat cache slot of token `pos` of a sequence."""
        table = self.tables[seq_id]
        if not 0 <= pos < len(table) * self.block_size:
            raise IndexError(f"sequence {seq_id}: position {pos} outside its {len(table)} blocks")
        return table[pos // self.block_size] * self.block_size + pos % self.block_size

    def free(self, seq_id: int) -> None:
        self._free.extend(reversed(self.tables.pop(seq_id)))
        del self.lengths[seq_id]
