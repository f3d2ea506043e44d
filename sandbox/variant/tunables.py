"""Kernel parameters a variant lets its caller choose, and the configuration one run uses.

A variant declares its parameters beside its LIMITS, each with its allowed values, the default first:

    TUNABLES = {"threads": (128, 64, 256), "partition_size": (512, 256, 1024)}

and takes them as keyword arguments: prepare(problem, backend, *, threads=128, partition_size=512).
A configuration is a dict of some of those parameters; what it leaves out takes the default. The
runner, check, resources, the traffic profiler and the sweep all resolve a configuration here, so a
parameter the variant does not declare is an error (naming the declared ones) and a value outside
its allowed values is a refusal (sandbox.Unsupported naming them) in both families alike.
"""
from __future__ import annotations

import itertools

from .limits import Unsupported
from ..errors import RefusedRequest


def declared(module) -> dict[str, tuple]:
    """The module's TUNABLES as {parameter: allowed values}, the default first ({} when it has none)."""
    table = getattr(module, "TUNABLES", {}) or {}
    return {name: tuple(values) for name, values in table.items()}


def defaults(module) -> dict:
    """{parameter: default}: the configuration a run uses when it names none."""
    return {name: values[0] for name, values in declared(module).items()}


def resolve(name: str, module, config: dict | None) -> dict:
    """The full configuration for `config` (defaults filled in), checked against the declaration."""
    table = declared(module)
    if config is not None and not isinstance(config, dict):
        hint = " (parse one with sandbox.variant.tunables.parse)" if isinstance(config, str) else ""
        raise RefusedRequest(f"config must be a dict NAME: VALUE such as {{'threads': 64}} or None, got "
                             f"{type(config).__name__} {config!r}{hint}; sandbox.tunables({name!r}) lists them")
    config = dict(config or {})
    unknown = [key for key in config if key not in table]
    if unknown:
        known = ", ".join(table) or "none"
        raise RefusedRequest(f"{name} has no tunable {unknown[0]!r} (its tunables: {known})")
    for key, value in config.items():
        if value not in table[key]:
            raise Unsupported(f"{name} does not support {key}={value!r} "
                              f"(allowed: {', '.join(map(str, table[key]))})")
    return {key: config.get(key, values[0]) for key, values in table.items()}


def grid(module) -> list[dict]:
    """Every configuration of the declared values, the default first (the cartesian product)."""
    table = declared(module)
    names = list(table)
    return [dict(zip(names, combo)) for combo in itertools.product(*(table[n] for n in names))]


def describe(config: dict) -> str:
    """"threads=64,partition_size=256" (the CLI's spelling); "" for the default of a variant without tunables."""
    return ",".join(f"{key}={value}" for key, value in config.items())


def parse(text: str, what: str = "--config") -> dict:
    """"threads=64,partition_size=256" -> {"threads": 64, "partition_size": 256}; values are ints when they
    look like ints, else floats, else strings. ValueError (one line) naming the bad item."""
    config: dict = {}
    for item in (t.strip() for t in (text or "").split(",")):
        if not item:
            continue
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise RefusedRequest(f"{what} {text!r}: expected NAME=VALUE items separated by commas, got {item!r}")
        if key in config:
            raise RefusedRequest(f"{what} {text!r}: {key} given twice")
        config[key] = _value(value)
    return config


def _value(text: str):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text
