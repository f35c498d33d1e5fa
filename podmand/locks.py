"""Per-key asyncio locks that exist only while someone holds or waits for one.

A plain ``defaultdict(asyncio.Lock)`` keeps one lock for every sandbox id any
caller ever named, unknown ones included: memory an anonymous client could grow
without bound.
"""

from __future__ import annotations

import asyncio
from types import TracebackType


class _Entry:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0  # holders and waiters


class Hold:
    """``async with table[key]``: take the key's lock; the entry goes with its last user."""

    __slots__ = ("_entry", "_key", "_table")

    def __init__(self, table: LockTable, key: str) -> None:
        self._table = table
        self._key = key
        self._entry: _Entry | None = None

    async def __aenter__(self) -> None:
        entry = self._table._entries.get(self._key)
        if entry is None:
            entry = self._table._entries[self._key] = _Entry()
        entry.users += 1
        try:
            await entry.lock.acquire()
        except BaseException:
            self._table._leave(self._key, entry)
            raise
        self._entry = entry

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        entry, self._entry = self._entry, None
        assert entry is not None
        entry.lock.release()
        self._table._leave(self._key, entry)


class LockTable:
    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}

    def __getitem__(self, key: str) -> Hold:
        return Hold(self, key)

    def __len__(self) -> int:
        return len(self._entries)

    def locked(self, key: str) -> bool:
        entry = self._entries.get(key)
        return entry is not None and entry.lock.locked()

    def _leave(self, key: str, entry: _Entry) -> None:
        entry.users -= 1
        if entry.users == 0 and self._entries.get(key) is entry:
            del self._entries[key]
