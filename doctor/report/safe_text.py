"""Terminal control characters from the environment, made visible before any text output.

A snapshot's host name, a GPU name or a package version is whatever the machine (or the file)
says; printed raw, `ESC[2J` clears the reader's screen and `ESC]0;...` retitles it. Every
text-like format (text, markdown, junit) renders a copy of its value in which each control
character other than tab and newline (C0, DEL, C1) is written as `\\xNN` instead. JSON keeps
the data as it is (the encoder escapes C0 itself)."""

from __future__ import annotations

import dataclasses
import re
from types import MappingProxyType
from typing import Any

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]|\r(?!\n)")


def visible(text: str) -> str:
    """`text` with its control characters (but tab, newline and CRLF) written as \\xNN."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group(0)):02x}", text) if _CONTROL.search(text) else text


def neutralise(value: Any) -> Any:
    """A copy of `value` (strings, mappings, sequences, frozen dataclasses, nested) whose
    strings went through `visible`; the same object where nothing needed changing."""
    if isinstance(value, str):
        return visible(value)
    if isinstance(value, (bytes, int, float, bool)) or value is None:
        return value
    if isinstance(value, MappingProxyType):
        return MappingProxyType(neutralise(dict(value)))
    if isinstance(value, dict):
        items = [(neutralise(k), neutralise(v)) for k, v in value.items()]
        if all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(items, value.items())):
            return value
        return type(value)(items)
    if isinstance(value, (list, tuple)):
        cleaned = [neutralise(v) for v in value]
        if all(a is b for a, b in zip(cleaned, value)):
            return value
        if hasattr(value, "_fields"):  # a NamedTuple
            return type(value)(*cleaned)
        return type(value)(cleaned)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {}
        for f in dataclasses.fields(value):
            if not f.init:
                continue
            old = getattr(value, f.name)
            new = neutralise(old)
            if new is not old:
                changes[f.name] = new
        return dataclasses.replace(value, **changes) if changes else value
    return value
