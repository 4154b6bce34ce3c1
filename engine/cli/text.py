"""Text and argument parsing for `rewind` (engine/cli/parser.py): what a terminal may show, and the
argument types whose bad values are usage errors (exit 2) before anything is opened."""

from __future__ import annotations

import argparse
import datetime as _dt
import re
import unicodedata

from engine.store import redact

_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")


def scrub(text: object) -> str:
    """`text` safe for a terminal: every URL in it redacted (passwords in the user part and in
    `password=` parameters), control and invisible characters shown as escapes, so stored
    agent text cannot move the cursor or recolour the screen."""

    def _redact(match: re.Match) -> str:
        url = match.group()
        tail = len(url) - len(url.rstrip(".,;:)]}"))
        core, rest = (url[:-tail], url[-tail:]) if tail else (url, "")
        return redact(core) + rest

    out = _URL.sub(_redact, str(text))
    return "".join(
        ch if ch in "\n" or unicodedata.category(ch) not in ("Cc", "Cf", "Cs", "Zl", "Zp")
        else ascii(ch)[1:-1]
        for ch in out
    )


def _cell(value: object) -> str:
    return scrub(value).replace("\n", " ")


def _fmt_time(ts: float | None) -> str:
    if ts is None:
        return "-"
    return _dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def _table(rows: list[list[str]], headers: list[str]) -> str:
    rows = [[_cell(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(out)


def out(text: str = "") -> None:
    """Print `text` for a person: URLs redacted, control characters escaped."""
    print(scrub(text))


def _nonblank(what: str):
    def parse(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(f"{what} must not be empty")
        return text

    parse.__name__ = what
    return parse


def _session_id(text: str) -> str:
    from engine.ids import validate_session_id

    try:
        return validate_session_id(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _non_negative(what: str, cast=float):
    def parse(text: str):
        try:
            value = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be a number, not {text!r}") from None
        if value != value or value < 0 or value == float("inf"):
            raise argparse.ArgumentTypeError(f"{what} must be a number >= 0, not {text!r}")
        return value

    parse.__name__ = what
    return parse


_AGE_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}


def parse_age(text: str) -> float:
    """An age in seconds from ``7``/``7d`` (days), ``12h``, ``30m``, ``90s`` or ``2w``.

    Raises:
        argparse.ArgumentTypeError: not such an age, or negative.
    """
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([smhdw]?)\s*", text or "")
    if not match:
        raise argparse.ArgumentTypeError(
            f"an age must be a number of days or a number with s, m, h, d or w (7d, 12h), "
            f"not {text!r}"
        )
    return float(match.group(1)) * _AGE_UNITS[match.group(2) or "d"]


def _days(text: str) -> float:
    return _non_negative("--days")(text) * 86400.0


def _describe_age(seconds: float) -> str:
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if seconds >= size:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def parse_until(text: str) -> str:
    """``+2h`` (from now: s, m, h, d, w) or an ISO time (without an offset: UTC); kept as
    text and turned into a time when the command runs.

    Raises:
        argparse.ArgumentTypeError: neither.
    """
    text = (text or "").strip()
    if text.startswith("+"):
        seconds = parse_age(text[1:])
        try:
            _dt.datetime.now(_dt.UTC) + _dt.timedelta(seconds=seconds)
        except (OverflowError, ValueError):
            raise argparse.ArgumentTypeError(
                f"--until {text} lies past 9999-12-31, the last time a calendar shows; give a "
                "nearer time, or leave --until out for a quarantine that lasts until someone "
                "lifts it") from None
        return text
    try:
        _dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--until takes +AGE (+30m, +2h, +1d) or an ISO time (2026-12-01T08:00, UTC "
            f"unless it has an offset), not {text!r}"
        ) from None
    return text


def _until_value(text: str | None):
    if text is None:
        return None
    if text.startswith("+"):
        return _dt.timedelta(seconds=parse_age(text[1:]))
    return _dt.datetime.fromisoformat(text)


def _fmt_utc(ts: float | None) -> str:
    if ts is None:
        return "until lifted"
    return _dt.datetime.fromtimestamp(ts, _dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
