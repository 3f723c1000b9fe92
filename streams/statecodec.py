"""Deterministic JSON for engine state (``dump``/``load``), without pickle.

State objects are small ``__slots__`` classes registered here (a class's ``ADDED``
maps slots added later to a factory for their value in older state); the codec walks
them, deques, tuples and dicts with non-string keys and writes sorted, compact
JSON (dicts as ordered pairs), so the same state always gives the same bytes (changelog-friendly),
and loads it back as it was: a tuple as a tuple, so a restored state compares, hashes and deduplicates
as the one dumped (a task taken over must go on exactly as its old owner would have).
"""

from __future__ import annotations

import json
from collections import deque
from typing import Any

_TYPES: dict[str, type] = {}


def state(cls: type) -> type:
    """Class decorator: make a ``__slots__`` class serialisable by this codec."""
    _TYPES[cls.__name__] = cls
    return cls


_PLAIN = frozenset({type(None), bool, int, str})


def _enc(v: Any) -> Any:
    t = type(v)
    if t in _PLAIN or (t is float and v - v == 0):  # v - v is NaN for inf and NaN
        return v
    if t is tuple:  # a tuple comes back a tuple: a restored state compares and hashes as the one dumped
        return {"__tu": [x if type(x) in _PLAIN or (type(x) is float and x - x == 0) else _enc(x) for x in v]}
    if isinstance(v, (list, tuple)):  # scalars inline: a checkpoint walks ~10^4 of them per node
        return [x if type(x) in _PLAIN or (type(x) is float and x - x == 0) else _enc(x) for x in v]
    if isinstance(v, (bool, int, str)):  # subclasses (enums)
        return v
    if isinstance(v, float):  # inf and NaN (and subclasses)
        if v != v or v in (float("inf"), float("-inf")):
            return {"__f": repr(v)}
        return v
    if isinstance(v, deque):
        return {"__dq": v.maxlen, "v": [_enc(x) for x in v]}
    if isinstance(v, dict):  # pairs keep insertion order, which iteration relies on
        return {"__kd": [[_enc(k), _enc(x)] for k, x in v.items()]}
    name = type(v).__name__
    if name in _TYPES:
        if "__setstate__" in type(v).__dict__:  # the class has its own compact form
            return {"__t": name, "__s": _enc(v.__getstate__())}
        return {"__t": name, **{s: _enc(getattr(v, s)) for s in type(v).__slots__}}
    raise TypeError(f"engine state cannot hold {name}")


def _dec(v: Any) -> Any:
    if isinstance(v, list):
        return [_dec(x) for x in v]
    if not isinstance(v, dict):
        return v
    if "__tu" in v:
        return tuple(_dec(x) for x in v["__tu"])
    if "__f" in v:
        return float(v["__f"])
    if "__dq" in v:
        return deque((_dec(x) for x in v["v"]), maxlen=v["__dq"])
    if "__kd" in v:
        return {_dec(k): _dec(x) for k, x in v["__kd"]}
    cls = _TYPES[v["__t"]]
    obj = cls.__new__(cls)
    if "__s" in v:
        obj.__setstate__(_dec(v["__s"]))
        return obj
    added = getattr(cls, "ADDED", {})
    for s in cls.__slots__:
        setattr(obj, s, _dec(v[s]) if s in v or s not in added else added[s]())
    return obj


#: Bumped when the layout of state changes; state of another format is refused with a clear
#: error (no release has written an older one).
FORMAT = 14  # 14: GPU window rows gain pcie_gen, pcie_width, pcie_link_frac (derived columns move three on; #35's PCIe link); 13: GPU window rows gain sm_active (derived columns move one on; 12 did not mark #35's tensor_active and nvlink_down, which moved them too), class window rows sm_active and tensor_active; 12: tuples come back as tuples (a restored inference stage forgot its histograms, its dedup missed repeats); 7: tasks' checkpoint time per bucket, GPUs' memory minima (leak detection); 8: stage 1's firings announced on arrival (streams/arrival.py); 9: stage 1's job allocations (the scheduler join); 10: scheduler clusters marked simulated, allocation judgements held for the scheduler watermark; 11: the service stage (fleet SLOs), SLO slots off the inference stage


def dumps(obj: Any) -> bytes:
    return json.dumps({"gws": FORMAT, "s": _enc(obj)}, sort_keys=True, separators=(",", ":")).encode()


def dumps_value(v: Any) -> bytes:
    """One value (no format header), for a caller that lays out several."""
    return json.dumps(_enc(v), sort_keys=True, separators=(",", ":")).encode()


def loads_value(data: bytes) -> Any:
    return _dec(json.loads(data))


def loads(data: bytes) -> Any:
    doc = json.loads(data)
    if not isinstance(doc, dict) or doc.get("gws") != FORMAT:
        got = doc.get("gws", 1) if isinstance(doc, dict) else 1
        raise ValueError(f"engine state format {got}, this version reads {FORMAT}: start with fresh state")
    return _dec(doc["s"])
