"""Connections and transactions on one SQLite file, shared by the store and the demo ledger.

Every thread gets its own connection (WAL lets readers run beside one writer); an in-memory
database has a single shared connection instead, because each `:memory:` connection would be a
database of its own. Writes run in ``BEGIN IMMEDIATE`` transactions: the write lock is taken at
the start, so two processes never interleave half-done changes and a busy database is waited for
(``busy_timeout``) rather than failing half-way through a transaction.

Connections outlive the handle that opened them, inside one process: `SQLiteDB.close` hands its
thread's connection to a small pool of idle ones (`IDLE_PER_FILE` per file and settings), and
the next handle on the same file takes it back instead of connecting anew. A new connection
parses the whole schema and prepares every statement again before its first answer, most of
what opening an engine per request costs; a pooled one has done both. An idle connection holds
no lock and no transaction, is handed out only while the file at its path is still the one it
opened, and is closed at exit (so the last connection to close still checkpoints the WAL).

WAL checkpoints run off the writer's path: the connections turn SQLite's automatic checkpoint
off (``wal_autocheckpoint = 0``), which would otherwise land on whichever commit crosses 1,000
pages and cost that agent step milliseconds, and a `Checkpointer` thread per handle copies the
WAL back into the file shortly after writes. A checkpoint only copies pages that are already
durable in the WAL, so a process killed at any moment loses nothing: the next opener replays the
WAL, as before.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import quote, urlparse

from engine.errors import StoreBusy, StoreFull, StoreUnavailable

BUSY_TIMEOUT_S = 30.0
"""How long a connection waits for another process's write lock before giving up."""

SYNCHRONOUS_MODES = frozenset({"OFF", "NORMAL", "FULL", "EXTRA"})

CHECKPOINT_DELAY_S = 0.1
"""How long the checkpointer lets writes gather after the first one before it checkpoints: a
burst of steps is checkpointed once, and a busy writer still sees one checkpoint per delay."""


RESTART_FRAMES = 8_192
"""WAL frames (pages, 4 KiB each by default) past which the checkpointer restarts the WAL even
while writes go on: it bounds the WAL at about 32 MiB under a steady stream of steps."""

RESTART_WAIT_S = 0.05
"""How long a RESTART checkpoint waits for a writer or reader before giving up until later."""


_pid = os.getpid()
"""This process's id, kept current across forks: `Checkpointer.poke` runs on every commit, and
``os.getpid()`` is a system call each time."""


def _forked() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_forked)


class _Run:
    """One checkpointer thread's own wake-up event and stop flag (a restarted checkpointer
    gets new ones, so an old thread can never miss its stop)."""

    __slots__ = ("pid", "stopped", "wake")

    def __init__(self) -> None:
        self.pid = _pid
        self.stopped = False
        self.wake = threading.Event()


class Checkpointer:
    """A daemon thread that checkpoints one WAL file shortly after writes (PASSIVE: it never
    waits for, nor blocks, a writer or a reader).

    Args:
        path: the database file.
    """

    def __init__(self, path: str):
        self.path = path
        self._run: _Run | None = None
        self._lock = threading.Lock()

    def poke(self) -> None:
        """Note a commit: a checkpoint follows within `CHECKPOINT_DELAY_S`."""
        run = self._run
        if run is None or run.pid != _pid:  # first write, or a forked child
            with self._lock:
                run = self._run
                if run is None or run.pid != _pid:
                    run = self._run = _Run()
                    threading.Thread(
                        target=self._loop, args=(run,), name="rewind-checkpoint", daemon=True
                    ).start()
        # Set only when clear: a set Event costs a lock and a notify per commit, twice per
        # guarded step. Seen set, the thread has not cleared it yet, so the checkpoint it runs
        # next starts after this commit and copies it.
        if not run.wake.is_set():
            run.wake.set()

    def _loop(self, run: _Run) -> None:
        conn: sqlite3.Connection | None = None
        try:
            while True:
                run.wake.wait()
                if run.stopped:
                    return
                run.wake.clear()
                time.sleep(CHECKPOINT_DELAY_S)
                try:
                    if conn is None:
                        # A short busy timeout: a RESTART checkpoint holds new writers back
                        # while it waits, so it gives up early and tries again later instead.
                        conn = sqlite3.connect(
                            self.path, timeout=RESTART_WAIT_S, isolation_level=None,
                            check_same_thread=False,
                        )
                    self._checkpoint(conn, idle=not run.wake.is_set())
                except sqlite3.Error:
                    # Nothing is lost: the pages stay in the WAL, and the next write retries.
                    pass
        finally:
            if conn is not None:
                conn.close()

    @staticmethod
    def _checkpoint(conn: sqlite3.Connection, *, idle: bool) -> None:
        # A PASSIVE checkpoint copies the WAL while writers go on, but a writer that began
        # during the copy keeps the WAL from starting over, so under steady writes the file
        # would only grow. Once writes pause (idle), or past RESTART_FRAMES, a RESTART
        # checkpoint, after the PASSIVE one did the bulk of the copying, holds writers back for
        # the last few pages only, and the next write starts the WAL from its beginning.
        busy, frames, _done = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        if not busy and (idle or frames >= RESTART_FRAMES):
            conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchall()

    def stop(self) -> None:
        """End the thread (a later `poke` starts a new one)."""
        with self._lock:
            run, self._run = self._run, None
        if run is not None:
            run.stopped = True
            run.wake.set()


def _set_wal(conn: sqlite3.Connection) -> None:
    """Put the database in WAL mode. Opening it while another process runs a RESTART
    checkpoint, or switches a new file to WAL, can answer "database is locked" at once, without
    the busy handler: retried with a growing pause, for at most `BUSY_TIMEOUT_S`."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    pause = 0.005
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.2)


def path_from_url(url: str) -> str:
    """The file path of a ``sqlite:`` URL ('' when it names none).

    ``sqlite:///relative/path``, ``sqlite:////absolute/path`` and ``sqlite:///:memory:`` (which
    gives ``:memory:``); a host part, as in ``sqlite://dir/file``, is read as the path's start.
    """
    parsed = urlparse(url)
    path = parsed.path[1:] if parsed.path.startswith("/") else parsed.path
    if parsed.netloc:
        path = parsed.netloc + parsed.path
    return path


IDLE_PER_FILE = 4
"""Idle connections kept per file (and synchronous level, and read-only or not) for the next
handle opened on it in this process."""


class _Idle:
    """Idle connections of this process, by (file, synchronous, read-only)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = _pid
        self._conns: dict[tuple[str, str, bool], list[tuple[sqlite3.Connection,
                                                            tuple[int, int]]]] = {}

    def take(self, key: tuple[str, str, bool]) -> sqlite3.Connection | None:
        """An idle connection to the file of `key` as it is now, or None."""
        while True:
            with self._lock:
                if self._pid != _pid:  # a forked child: the parent's connections are not ours
                    self._conns, self._pid = {}, _pid
                    return None
                conns = self._conns.get(key)
                if not conns:
                    return None
                conn, opened = conns.pop()
            try:
                st = os.stat(key[0])
                if (st.st_dev, st.st_ino) == opened:
                    return conn
            except OSError:
                pass
            conn.close()  # the file was removed or replaced since: that connection reads another

    def give(self, key: tuple[str, str, bool], conn: sqlite3.Connection) -> bool:
        """Keep `conn` for the next handle on its file; False when it must be closed instead
        (a transaction open, the file gone, enough kept already)."""
        if conn.in_transaction:
            return False
        try:
            st = os.stat(key[0])
        except OSError:
            return False
        conn.set_trace_callback(None)  # what a caller hooked onto it goes with the handle
        with self._lock:
            if self._pid != _pid:
                return False
            conns = self._conns.setdefault(key, [])
            if len(conns) >= IDLE_PER_FILE:
                return False
            conns.append((conn, (st.st_dev, st.st_ino)))
        return True

    def close_all(self) -> None:
        """Close every idle connection (at exit; tests that must see a connection opened)."""
        with self._lock:
            conns = [c for kept in self._conns.values() for c, _ in kept]
            self._conns = {}
            mine = self._pid == _pid
        if mine:
            for conn in conns:
                conn.close()


IDLE = _Idle()
"""This process's idle connections (`SQLiteDB.close` gives, `SQLiteDB.conn` takes)."""

atexit.register(IDLE.close_all)


class _Write:
    """`SQLiteDB.write`'s context manager: a class, not a generator, as it runs twice per
    guarded step (``BEGIN IMMEDIATE`` on entry; ``COMMIT``, or ``ROLLBACK`` when the block
    raises, on exit)."""

    __slots__ = ("db", "conn")

    def __init__(self, db: SQLiteDB):
        self.db = db

    def __enter__(self) -> sqlite3.Connection:
        db = self.db
        db._lock.acquire()
        try:
            conn = self.conn = db.conn
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            db._lock.release()
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            # The busy handler waited `busy_timeout` for the lock: a bare "database is locked"
            # would name neither the store nor what to do.
            raise StoreBusy(
                f"{db.name} stayed locked by another connection for {BUSY_TIMEOUT_S:g} s "
                f"({exc}); nothing was written. A write transaction is open on the file "
                "elsewhere (a sqlite3 shell, a backup, a stuck process): end it, then retry"
            ) from exc
        except BaseException:
            db._lock.release()
            raise
        return conn

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        db = self.db
        try:
            if exc_type is not None:
                if self.conn.in_transaction:  # SQLite may have rolled back already (a full disk)
                    self.conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error) and _full(exc):
                    raise _store_full(db.name, exc) from exc
                return
            try:
                self.conn.execute("COMMIT")
            except sqlite3.Error as failed:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                if _full(failed):
                    raise _store_full(db.name, failed) from failed
                raise
            if db._checkpointer is not None:
                db._checkpointer.poke()
        finally:
            db._lock.release()


def _full(exc: sqlite3.Error) -> bool:
    """True when `exc` says the disk (or the database's size limit) is full."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code == sqlite3.SQLITE_FULL or "disk is full" in str(exc)


def _store_full(name: str, exc: sqlite3.Error) -> StoreFull:
    return StoreFull(f"{name}: the disk holding the store is full ({exc}); nothing of this "
                     "write was kept. Free space on that disk (or move the store to a larger "
                     "one), then retry")


class SQLiteDB:
    """Per-thread connections to one SQLite database and its write transactions.

    Args:
        path: the file, or ``:memory:``.
        name: how error messages name the database (e.g. the store URL).
        synchronous: the ``PRAGMA synchronous`` level (OFF, NORMAL, FULL or EXTRA).

    Raises:
        StoreUnavailable: the folder of `path` cannot be created.
    """

    def __init__(self, path: str, *, name: str, synchronous: str = "NORMAL"):
        if synchronous not in SYNCHRONOUS_MODES:
            raise ValueError(f"{name}: synchronous must be OFF, NORMAL, FULL or EXTRA")
        self.path = path
        self.name = name
        self.memory = path == ":memory:"
        self._synchronous = synchronous
        self._local = threading.local()
        # One lock per handle: the shared in-memory connection must not run two transactions at
        # once, and a thread's own connection is cheap to guard the same way.
        self._lock = threading.RLock()
        self._shared: sqlite3.Connection | None = None
        self._checkpointer: Checkpointer | None = None
        self.read_only = (not self.memory and os.path.exists(path)
                          and not os.access(path, os.W_OK))
        """The file exists but this process may not write it: opened read-only, so reading
        commands work and a write fails with SQLite's "readonly database" error."""
        self._idle_key = (os.path.abspath(path), synchronous, self.read_only)
        """Which idle connections (`IDLE`) this handle may take and give back."""
        if not self.memory:
            directory = os.path.dirname(os.path.abspath(path))
            try:
                if not os.path.isdir(directory):  # a stat, not a mkdir, on every open
                    os.makedirs(directory, exist_ok=True)
            except OSError as exc:
                raise StoreUnavailable(f"cannot create the folder for {name}: {exc}") from exc
            if not self.read_only:
                self._checkpointer = Checkpointer(path)
                # a handle dropped without close() must not leave its thread behind
                weakref.finalize(self, self._checkpointer.stop)

    def _connect(self) -> sqlite3.Connection:
        if not self.memory:
            idle = IDLE.take(self._idle_key)
            if idle is not None:
                return idle
        try:
            target = self.path
            if self.read_only:
                target = "file:" + quote(os.path.abspath(self.path)) + "?mode=ro"
            conn = sqlite3.connect(
                target, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False,
                uri=self.read_only,
            )
            # connect's timeout is the busy timeout; foreign keys are off by default and no
            # table declares one: an engine opened per request runs no statement it needs not
            if not self.memory and not self.read_only:
                _set_wal(conn)
                conn.execute("PRAGMA wal_autocheckpoint = 0")  # the Checkpointer does it
            conn.execute(f"PRAGMA synchronous = {self._synchronous}")
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"cannot open {self.name}: {exc}") from exc
        return conn

    @property
    def conn(self) -> sqlite3.Connection:
        """This thread's connection (the shared one for ``:memory:``), opened on first use."""
        if self.memory:  # one shared connection: every thread must see the same database
            if self._shared is None:
                self._shared = self._connect()
            return self._shared
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
        return conn

    def write(self) -> _Write:
        """A write transaction: committed when the block ends, rolled back when it raises."""
        return _Write(self)

    def read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Rows of one query, outside any write transaction (the last committed state)."""
        with self._lock:
            return self.conn.execute(sql, params).fetchall()

    @contextlib.contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        """This thread's connection in one read transaction: the queries of the block see one
        committed state (inside this thread's write, that write's state)."""
        with self._lock:
            conn = self.conn
            if conn.in_transaction:
                yield conn
                return
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                conn.execute("COMMIT")

    def read_named(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        """Like `read`, with each row's columns readable by name (`sqlite3.Row`)."""
        with self._lock:
            cursor = self.conn.execute(sql, params)
            cursor.row_factory = sqlite3.Row
            return cursor.fetchall()

    def close(self) -> None:
        """Close this thread's connection (and the shared one); reopened on next use. A file's
        connection goes to the process's idle ones (`IDLE`) for the next handle on the file."""
        if self._checkpointer is not None:
            self._checkpointer.stop()  # a reopened handle starts it again
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            self._local.conn = None
            if not IDLE.give(self._idle_key, conn):
                conn.close()
        if self._shared is not None:
            self._shared.close()
            self._shared = None
