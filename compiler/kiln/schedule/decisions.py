"""Decisions: the named choices a schedule rule makes, so that the default pipeline and a
search share one definition of each rule (STYLE.md, "Schedule rules, the target and the
tuner").

A rule computes the legal options of each choice and its heuristic's pick from the target,
and asks ``decide.choose(name, options, default)``. What comes back depends on who made the
``Decisions``:

- ``Decisions()``: the default (what ``kiln.get_pipeline("default")`` does);
- ``Decisions(fixed={"mr": 4})``: replay recorded values (a tuning record); a recorded value
  that is no longer among the options (the kernel or the rule changed) falls back to the
  default and is listed in ``stale``;
- ``Decisions(sampler=fn)``: ``fn(name, options, default)`` picks (a tuner's random or
  evolutionary search), always among the legal options, so an illegal sample never reaches
  a schedule primitive.

Every answer is recorded in ``made`` (name -> value, in order); ``default_schedule`` writes
them into the kernel's ``kiln.decisions`` attribute, e.g. ``"mr=6 cols=1 parallel=2"``.

>>> d = Decisions(fixed={"mr": 4})
>>> d.choose("mr", [1, 2, 4, 6], default=6), d.choose("unroll", [1, 2], default=2)
(4, 2)
>>> d.text()
'mr=4 unroll=2'
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

Sampler = Callable[[str, Sequence[Any], Any], Any]


class Decisions:
    """The choices of one kernel's schedule (module docstring)."""

    def __init__(self, fixed: Optional[Mapping[str, Any]] = None,
                 sampler: Optional[Sampler] = None):
        self.fixed: Dict[str, Any] = dict(fixed or {})
        self.sampler = sampler
        self.made: Dict[str, Any] = {}
        self.options: Dict[str, List[Any]] = {}
        self.stale: List[str] = []

    def choose(self, name: str, options: Sequence[Any], default: Any) -> Any:
        """One of ``options`` for the choice ``name``; ``default`` (which must be among the
        options) unless a fixed value or the sampler says otherwise."""
        options = list(dict.fromkeys(options))     # unique, in order
        if default not in options:
            raise ValueError(f"decision {name!r}: default {default!r} is not among the "
                             f"options {options}")
        if name in self.made:
            raise ValueError(f"decision {name!r} made twice in one schedule")
        if name in self.fixed:
            value = self.fixed[name]
            if value not in options:
                self.stale.append(name)
                value = default
        elif self.sampler is not None:
            value = self.sampler(name, options, default)
            if value not in options:
                raise ValueError(f"decision {name!r}: the sampler gave {value!r}, not one of "
                                 f"{options}")
        else:
            value = default
        self.made[name] = value
        self.options[name] = options
        return value

    def text(self) -> str:
        """The decisions made, as ``"name=value ..."`` (the ``kiln.decisions`` attribute)."""
        return " ".join(f"{k}={_fmt(v)}" for k, v in self.made.items())


def parse_decisions(text: str) -> Dict[str, Any]:
    """The name -> value map of a ``kiln.decisions`` attribute (``Decisions.text``)."""
    out: Dict[str, Any] = {}
    for item in text.split():
        name, _, value = item.partition("=")
        out[name] = _parse_value(value)
    return out


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _parse_value(text: str) -> Any:
    if text in ("true", "false"):
        return text == "true"
    try:
        return int(text)
    except ValueError:
        return text
