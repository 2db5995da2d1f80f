"""``KernelSignature``: one list of a kernel's parameters that both writes the kernel's C
parameter list and packs its host-side arguments.

Why: a kernel's parameters were written twice, once in the emitter's template and once in the
call's ``_pack``, in the same order, and nothing checked that the two agreed; an argument
added to one and not the other shifts every later one by a slot and the kernel reads garbage.
Here the emitter renders the list (:meth:`KernelSignature.render`) and the call packs with
the same object (:meth:`KernelSignature.pack`), which refuses a missing or unexpected value.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

#: How the host packs each kind of parameter: the NumPy scalar type a value becomes (CuPy
#: passes its bytes to the kernel), or None for a value passed as it is (a tensor map, already
#: a 128-byte NumPy record: tma.encode_tiled_2d).
PACKERS: dict[str, str | None] = {"tensor_map": None, "pointer": "uint64", "uint64": "uint64",
                                  "int32": "int32", "int64": "int64", "float32": "float32"}
#: the continuation of a parameter list over several lines (the emitters' layout)
INDENT = " " * 7
#: the C type of a tensor-map parameter (``pcwg::TensorMap``: the driver's 128 opaque bytes,
#: passed by value in the kernel's constant bank)
TENSOR_MAP_TYPE = "const __grid_constant__ pcwg::TensorMap"


class SignatureError(ValueError):
    """Values that do not match a kernel's parameters (a missing or an unexpected one)."""


@attrs.frozen(kw_only=True)
class KernelParam:
    """One parameter: its C name (the key of its value when packing), its C type, how the host
    packs it (a key of :data:`PACKERS`), and whether the rendered list starts a new line at
    it."""

    name: str
    c_type: str
    pack: str
    new_line: bool = False

    def __attrs_post_init__(self) -> None:
        if self.pack not in PACKERS:
            raise SignatureError(f"kernel parameter {self.name}: packer {self.pack!r}; pass one "
                                 f"of {', '.join(PACKERS)}")


def params(*lines: tuple[tuple[str, str, str], ...],
           new_line: bool = False) -> tuple[KernelParam, ...]:
    """Parameters from lines of ``(c_type, name, pack)``: each line after the first starts a
    new line of the rendered list, the first too with ``new_line`` (parameters appended to
    another list)."""
    return tuple(KernelParam(name=name, c_type=c_type, pack=pack,
                             new_line=(i > 0 or new_line) and j == 0)
                 for i, line in enumerate(lines) for j, (c_type, name, pack) in enumerate(line))


@attrs.frozen(kw_only=True)
class KernelSignature:
    """A kernel's parameters in order (``kernel``: its name, for the messages)."""

    kernel: str
    params: tuple[KernelParam, ...]

    def __add__(self, more: tuple[KernelParam, ...]) -> KernelSignature:
        return attrs.evolve(self, params=self.params + more)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def render(self) -> str:
        """The C parameter list, without its parentheses, as the emitters lay it out."""
        out = ""
        for i, p in enumerate(self.params):
            if i:
                out += f",\n{INDENT}" if p.new_line else ", "
            out += f"{p.c_type} {p.name}"
        return out

    def pack(self, values: Mapping[str, Any], np: Any) -> tuple[Any, ...]:
        """The kernel's arguments from ``values`` (parameter name -> value), each packed as its
        parameter says; one :class:`SignatureError` line when a value is missing or extra."""
        self._check(values, ())
        return tuple(_packer(p, np)(values[p.name]) for p in self.params)

    def pack_around(self, late: str | tuple[str, ...], values: Mapping[str, Any],
                    np: Any) -> tuple[tuple[Any, ...], Callable[..., Any], tuple[Any, ...]]:
        """The arguments but parameter ``late``'s, packed from ``values`` (which must not hold
        it): those before it, its packer, those after.  A value that changes every call (an
        output allocated per call) is packed then, between the two kept halves.  ``late`` may
        name several consecutive parameters (a call with several outputs): the packer then
        takes one value each and gives their packed values as a tuple."""
        names = (late,) if isinstance(late, str) else tuple(late)
        missing = [n for n in names if n not in self.names]
        if missing or not names:
            raise SignatureError(f"kernel {self.kernel}: no parameter {', '.join(missing)}; "
                                 f"its parameters: {', '.join(self.names)}")
        at = self.names.index(names[0])
        if self.names[at:at + len(names)] != names:
            raise SignatureError(f"kernel {self.kernel}: late parameters {', '.join(names)} are "
                                 "not consecutive in its list; name consecutive ones")
        self._check(values, names)
        packed = [_packer(p, np)(values[p.name]) for p in self.params if p.name not in names]
        packers = [_packer(p, np) for p in self.params[at:at + len(names)]]
        if isinstance(late, str):
            return tuple(packed[:at]), packers[0], tuple(packed[at:])

        def pack_late(*late_values: Any) -> tuple[Any, ...]:
            return tuple(f(v) for f, v in zip(packers, late_values, strict=True))
        return tuple(packed[:at]), pack_late, tuple(packed[at:])

    def _check(self, values: Mapping[str, Any], late: tuple[str, ...]) -> None:
        wanted = [n for n in self.names if n not in late]
        missing = [n for n in wanted if n not in values]
        extra = [n for n in values if n not in wanted]
        if missing or extra:
            said = "; ".join(part for part in (
                f"missing {', '.join(missing)}" if missing else "",
                f"unexpected {', '.join(extra)}" if extra else "") if part)
            raise SignatureError(f"kernel {self.kernel}: arguments {said}; pass exactly its "
                                 f"parameters ({', '.join(wanted)})")


def _packer(p: KernelParam, np: Any) -> Callable[[Any], Any]:
    kind = PACKERS[p.pack]
    return _as_is if kind is None else getattr(np, kind)


def _as_is(value: Any) -> Any:
    return value
