"""The runtime: what sessions, memory, operator actions and the saga share.

`Engine` builds one `Runtime` and hands it to every session handle and memory it creates, so
those take the wiring they need (store, clock, retention, detector factory, memory config,
compensation handlers) without holding, or importing, the `Engine` itself. The dependency graph
runs one way: engine -> sessions, actions, saga, fleet -> runtime -> store, loops.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import tomllib
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from engine.errors import ConfigError, UnknownSession
from engine.freeze import (
    STORE_KEY,
    STORE_NAMESPACE,
    FreezeWindow,
    PolicyChoice,
    from_document,
    resolve,
)
from engine.ids import validate_session_id
from engine.limits import Limits
from engine.loops.detector import LoopDetector
from engine.records import SessionInfo
from engine.store.base import Retention, Store
from engine.types import LOOP_POLICIES, LoopPolicy, checked_policy

if TYPE_CHECKING:
    from engine.memory.config import MemoryConfig

log = logging.getLogger("rewind")

DETECTOR_NAMESPACE = "detector"
"""Fleet document namespace of the declared detector settings (one key, `DETECTOR_KEY`)."""
DETECTOR_KEY = "current"
FLEET_CACHE_S = 1.0
"""Seconds a process reuses what it read of the store's fleet documents (the declared freeze,
detector settings, quarantines) before reading it again."""

CONFIG_ENV = "REWIND_CONFIG"
"""Environment variable naming this process's configuration file (TOML)."""
CONFIG_FILE = "rewind.toml"
"""The configuration file read from the working directory when $REWIND_CONFIG is unset."""

T = TypeVar("T")


class FleetDocCache(Generic[T]):
    """One namespace of the store's fleet documents as this process last read it, parsed, and
    reused for at most `FLEET_CACHE_S` seconds (monotonic clock): a guarded step costs no store
    read, and every process follows a change made elsewhere within about a second. A process
    that changes the namespace itself calls `refresh` (or `forget`) to see it at once.
    Thread-safe: agents may share one engine between threads."""

    def __init__(self, read: Callable[[], dict[str, Any]],
                 parse: Callable[[dict[str, Any]], T], ttl: float = FLEET_CACHE_S) -> None:
        """`read` returns the namespace's documents from the store; `parse` makes the value
        kept from them."""
        self._read, self._parse, self._ttl = read, parse, ttl
        self._value: T | None = None
        self._at = float("-inf")
        self._lock = threading.Lock()

    def get(self) -> T:
        """The parsed documents, read again when the last read is `ttl` seconds old."""
        if time.monotonic() - self._at < self._ttl:
            return self._value  # type: ignore[return-value]  # set with _at, under the lock
        return self.refresh()

    def refresh(self) -> T:
        """Read the namespace now, keep and return it parsed."""
        with self._lock:
            value = self._parse(self._read())
            self._value, self._at = value, time.monotonic()
            return value

    def forget(self) -> None:
        """Read the namespace again on next use."""
        self._at = float("-inf")


def _declared_settings(docs: dict[str, Any]) -> dict[str, Any]:
    doc = docs.get(DETECTOR_KEY)
    settings = doc.get("settings") if isinstance(doc, dict) else None
    return dict(settings) if isinstance(settings, dict) else {}


def _declared_freeze(docs: dict[str, Any]) -> FreezeWindow | None:
    return from_document(docs.get(STORE_KEY))

CompensationHandler = Callable[[Any, str], Any]
"""A compensation handler: called with (args, idempotency_key); raising means it failed."""


@dataclass(eq=False)
class Runtime:
    """Shared wiring of one engine. Mutable on purpose: tests and integrations tune retention."""

    store: Store
    """The single source of truth."""
    clock: Callable[[], float] = time.time
    """Unix time source (tests pass a fake clock)."""
    retention: Retention = field(default_factory=Retention)
    """Which snapshots stay restorable as new ones are taken."""
    detector_factory: Callable[[], LoopDetector] = LoopDetector
    """Makes the loop detector of each session handle."""
    on_loop: LoopPolicy = "rollback"
    """Default loop policy of session handles that were given none (outside a freeze)."""
    detector_settings: dict[str, Any] = field(default_factory=dict)
    """This process's configured detector settings (`DetectorConfig` field -> value, as JSON
    data: ``[rewind.detector]`` of its configuration file, see `configured_detector`), applied
    over `detector_factory`'s config; settings declared in the store apply over these."""
    freeze: FreezeWindow | None = None
    """This process's configured change freeze ($REWIND_FREEZE_*, `[rewind.freeze]`, or given
    to the engine); a freeze declared in the store (`declared_freeze`) wins over it."""
    compensation_attempts: int = 5
    """Tries before a failing compensation stays failed."""
    compensation_backoff: tuple[float, float, float] = (2.0, 4.0, 300.0)
    """(first wait, factor, longest wait) in seconds between tries of a failing compensation:
    2 s, 8 s, 32 s, 128 s by default, so a blip of a few seconds needs no person. The next
    try is due then; a process with the handler runs it on its next `run_compensations`."""
    memory_config: Any = None
    """`MemoryConfig` of the sessions' memory; None: the defaults, made on first use."""
    handlers: dict[str, CompensationHandler] = field(default_factory=dict)
    """Compensation handlers registered in this process, by name."""
    worker_id: str = ""
    """Who claims compensations in the outbox: host, pid and this runtime."""
    limits: Limits = field(default_factory=Limits)
    """Size limits of what one call may write, checked before the store is touched."""
    announced: tuple[str, ...] = field(default=(), repr=False)
    """Handler names of this process's last worker heartbeat in the store
    (`engine.recovery.saga`)."""
    announced_at: float = field(default=float("-inf"), repr=False)
    """Engine-clock time of that heartbeat."""
    _fleet_caches: dict[tuple[str, Callable[..., Any]], FleetDocCache[Any]] = field(
        default_factory=dict, repr=False)
    explained: OrderedDict[tuple[Any, ...], Any] = field(default_factory=OrderedDict,
                                                         repr=False)
    """"Why flagged" answers already computed (`engine.fleet.queries.why_flagged`): a flag's
    explanation depends only on the steps up to it, which never change."""

    def __post_init__(self) -> None:
        if checked_policy(self.on_loop) is None:
            raise ValueError("on_loop must be one of " + ", ".join(LOOP_POLICIES))
        if not self.worker_id:
            self.worker_id = f"{socket.gethostname()}:{os.getpid()}:{id(self):x}"
        if self.detector_settings:
            from engine.loops.replay import checked_settings, detector_config

            self.detector_settings = checked_settings(self.detector_settings,
                                                      "the configured detector settings")
            try:  # over the factory's own config too, so a session handle never fails on them
                detector_config(self.detector_settings, base=self.detector_factory().config)
            except ConfigError as exc:
                raise ConfigError(f"the configured detector settings do not fit the engine's "
                                  f"detector factory: {exc}") from None

    def loop_policy(self, explicit: LoopPolicy | None = None,
                    now: float | None = None, exempt: bool = False) -> PolicyChoice:
        """The loop policy in effect at unix time `now` (None: the clock) for a session handle
        given `explicit` (None: it was given none), `exempt` from the freeze or not; see
        `engine.freeze.resolve`. The freeze is the fleet's (`freeze_in_force`)."""
        return resolve(explicit, self.freeze_in_force()[0], self.on_loop,
                       self.clock() if now is None else now, exempt)

    def freeze_in_force(self) -> tuple[FreezeWindow | None, str]:
        """The freeze this process follows and where it comes from: the one declared in the
        store (``"store"``, the fleet fact every process on the store follows), else this
        process's configuration (``"config"``), else none (``""``)."""
        declared = self.declared_freeze()
        if declared is not None:
            return declared, "store"
        return (self.freeze, "config") if self.freeze is not None else (None, "")

    def fleet_cache(self, namespace: str,
                    parse: Callable[[dict[str, Any]], T]) -> FleetDocCache[T]:
        """The one cache in this runtime of fleet document namespace `namespace` parsed by
        `parse` (a module-level function: the pair is the key), made on first use."""
        key = (namespace, parse)
        cache = self._fleet_caches.get(key)
        if cache is None:
            cache = self._fleet_caches.setdefault(  # the store as it is when read
                key, FleetDocCache(lambda: self.store.fleet_docs(namespace), parse))
        return cache

    def declared_freeze(self) -> FreezeWindow | None:
        """The freeze declared in the store, read at most once per `FLEET_CACHE_S` seconds
        (monotonic), so a guarded step costs no store read and every process follows a new
        declaration within a second."""
        return self.fleet_cache(STORE_NAMESPACE, _declared_freeze).get()

    def new_detector(self) -> tuple[LoopDetector, dict[str, Any]]:
        """A loop detector for a session handle, and the settings it follows over the
        factory's own config (``{}``: none), which each of its verdicts records.

        Every process on the store builds its detectors the same way: `detector_factory`'s
        config, then this process's configured settings (`detector_settings`, from
        ``[rewind.detector]``), then the settings declared in the store
        (`engine.fleet.actions.declare_detector`), each field taken from the last that sets it."""
        detector = self.detector_factory()
        own, declared = self.detector_settings, self.declared_detector()
        if not own and not declared:
            return detector, {}
        from engine.loops.replay import detector_config

        if declared:
            settings = {**own, **declared}
            try:
                return LoopDetector(detector_config(settings, base=detector.config)), settings
            except ConfigError as exc:  # a document from a newer release, say: never stop agents
                log.warning("ignoring the detector settings declared in the store: %s", exc)
        if not own:
            return detector, {}
        return LoopDetector(detector_config(own, base=detector.config)), dict(own)

    def detector_in_force(self) -> tuple[dict[str, Any], str]:
        """The settings new session handles follow over the factory's config, and where they
        come from: ``"store"`` when settings are declared in the store (each field not declared
        still comes from this process's configuration), ``"config"`` when only this
        process's configuration sets some, ``""`` for neither."""
        declared = self.declared_detector()
        if declared:
            return {**self.detector_settings, **declared}, "store"
        return (dict(self.detector_settings), "config") if self.detector_settings else ({}, "")

    def declared_detector(self) -> dict[str, Any]:
        """The detector settings declared in the store (field -> value), read at most once per
        `FLEET_CACHE_S` seconds."""
        return self.fleet_cache(DETECTOR_NAMESPACE, _declared_settings).get()

    def forget_declared_detector(self) -> None:
        """Read the store's detector settings again on next use."""
        self.fleet_cache(DETECTOR_NAMESPACE, _declared_settings).forget()

    def forget_declared_freeze(self) -> None:
        """Read the store's freeze again on next use (after this process changed it)."""
        self.fleet_cache(STORE_NAMESPACE, _declared_freeze).forget()

    def memory(self) -> MemoryConfig:
        """The memory config, created with the defaults on first use."""
        if self.memory_config is None:
            from engine.memory.config import MemoryConfig

            self.memory_config = MemoryConfig()
        return self.memory_config

    @cached_property
    def detector_horizon(self) -> int:
        """How many recent steps a detector looks at (read once from one detector)."""
        return self.detector_factory().horizon

    def require_session(self, sid: str) -> SessionInfo:
        """The stored summary of session `sid`.

        Raises:
            InvalidSessionId: bad id. UnknownSession: no such session.
        """
        info = self.store.get_session(validate_session_id(sid))
        if info is None:
            raise UnknownSession(f"no session {sid!r} in {self.store.url}")
        return info


class EngineConfig:
    """`engine.config`: how one engine was wired, read through to its `Runtime`. Retention and
    the memory config may be changed on a live engine (tests and integrations tune them)."""

    def __init__(self, rt: Runtime) -> None:
        self._rt = rt

    @property
    def retention(self) -> Retention:
        """Which snapshots stay restorable as new ones are taken."""
        return self._rt.retention

    @retention.setter
    def retention(self, value: Retention) -> None:
        self._rt.retention = value

    @property
    def memory_config(self) -> MemoryConfig:
        """`MemoryConfig` shared by the sessions of this engine (created on first use)."""
        return self._rt.memory()

    @memory_config.setter
    def memory_config(self, value: MemoryConfig) -> None:
        self._rt.memory_config = value

    @property
    def detector_factory(self) -> Callable[[], LoopDetector]:
        """Makes the loop detector of each session handle."""
        return self._rt.detector_factory

    @property
    def on_loop(self) -> LoopPolicy:
        """The default loop policy (outside a freeze) of session handles given none."""
        return self._rt.on_loop

    @property
    def worker_id(self) -> str:
        """Who claims compensations in the outbox: host, pid and this engine."""
        return self._rt.worker_id

    @property
    def degraded(self) -> str | None:
        """Why the engine runs on its fallback store, or None when it runs on the one asked
        for."""
        store = self._rt.store
        if getattr(store, "degraded", False):
            return getattr(store, "degraded_reason", None) or "running on the fallback store"
        return None


def _refuse_misnamed_detector_table(doc: Mapping[str, Any], section: Mapping[str, Any],
                                    where: str) -> None:
    """Raises ConfigError for a detector table under another name (`[rewind.detectors]`,
    `[rewind.Detector]`, a bare `[detector]`): read as no settings at all, the process would
    run the defaults while its operator believes the file's. Other tables of a shared file
    (`[rewind.freeze]`, accounts) are left alone."""
    import difflib

    named = [f"[rewind.{key}]" for key in section
             if isinstance(key, str) and key != "detector"
             and difflib.SequenceMatcher(None, key.lower(), "detector").ratio() >= 0.8]
    if "rewind" not in doc and isinstance(doc.get("detector"), dict):
        named.append("[detector]")
    if named:
        raise ConfigError(f"{where}: {', '.join(named)} is not read; the detector's settings "
                          "go in a table named exactly [rewind.detector]")


def configured_detector(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The detector settings of this process's configuration file: the ``[rewind.detector]``
    table of the TOML file $REWIND_CONFIG names, else of ``rewind.toml`` in the working
    directory when there is one (``{}`` without a file or a table). `Engine.open` reads it, so
    agents, the demo, the MCP proxy, the OTLP listener, the console and the CLI started with the
    same file build the same detector; settings declared in the store apply over it.

    ```toml
    [rewind.detector]              # rewind.toml, or the file $REWIND_CONFIG names
    repeat_threshold = 4
    exempt_tools = ["wait_ci"]
    tool_breaker_failures = { flaky_api = 8 }
    ```

    Returns:
        The settings as JSON data (`DetectorConfig` field -> value), checked.

    Raises:
        ConfigError: $REWIND_CONFIG names no file, the file is not valid TOML, or a field or
            value is wrong (the message names the file, the field and the value).
    """
    env = os.environ if env is None else env
    named = (env.get(CONFIG_ENV) or "").strip()
    path = Path(named) if named else Path(CONFIG_FILE)
    if not path.is_file():
        if named:
            raise ConfigError(f"${CONFIG_ENV} names {named[:200]!r}, which is not a file; "
                              f"point it at a TOML file or unset it")
        return {}
    where = str(path.resolve())
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the configuration file {where}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where} is not valid TOML: {exc}") from None
    section = doc.get("rewind", {})
    if not isinstance(section, dict):
        raise ConfigError(f"{where}: rewind must be a table ([rewind.detector])")
    if "detector" not in section:
        _refuse_misnamed_detector_table(doc, section, where)
        return {}
    from engine.loops.replay import checked_settings

    return checked_settings(section["detector"], f"[rewind.detector] in {where}")
