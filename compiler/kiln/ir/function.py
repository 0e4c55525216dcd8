"""Functions and modules: ``PrimFunc`` (a tensor program) and ``IRModule`` (functions by name)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Mapping, Tuple, Union

from .expr import Buffer, Node, Var
from .stmt import Block, BlockRealize, IntImm, Stmt


@dataclass(frozen=True, eq=False, repr=False)
class PrimFunc(Node):
    """A tensor program in destination-passing style: inputs and outputs are all parameters.

    ``params`` are Buffers (and scalar Vars, rarely). Symbolic dimensions are the Vars that appear
    in parameter shapes; they are bound from the arguments at call time. ``body`` is the root
    ``BlockRealize`` (block name "root"), whose ``alloc_buffers`` are the function's scratch
    buffers. ``attrs`` is a sorted tuple of ``(key, value)`` pairs.
    """
    params: Tuple[Union[Buffer, Var], ...]
    body: Stmt
    attrs: Tuple[Tuple[str, Any], ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "params", tuple(self.params))
        object.__setattr__(self, "attrs", tuple(sorted(self.attrs)))

    @property
    def root_block(self) -> Block:
        return self.body.block if isinstance(self.body, BlockRealize) else None

    def with_body(self, body: Stmt) -> "PrimFunc":
        return PrimFunc(self.params, body, self.attrs)


def root_realize(body: Stmt, alloc_buffers=()) -> BlockRealize:
    """Wrap ``body`` in the root block every PrimFunc has."""
    return BlockRealize((), IntImm(1, "bool"), Block("root", (), (), (), body, None, tuple(alloc_buffers)))


class IRModule(Node):
    """Functions by name. Treat it as immutable: methods return new modules.

    >>> mod = IRModule({"main": func})                # doctest: +SKIP
    >>> mod["main"] is func                           # doctest: +SKIP
    True
    """

    def __init__(self, functions: Mapping[str, Node] | None = None, attrs: Mapping[str, Any] | None = None):
        self.functions: Dict[str, Node] = dict(functions or {})
        self.attrs: Dict[str, Any] = dict(attrs or {})

    def __getitem__(self, name: str) -> Node:
        try:
            return self.functions[name]
        except KeyError:
            raise KeyError(f"IRModule has no function {name!r}; it has {sorted(self.functions)}") from None

    def __contains__(self, name: str) -> bool:
        return name in self.functions

    def __iter__(self):
        return iter(self.functions)

    def items(self):
        return self.functions.items()

    def with_function(self, name: str, func: Node) -> "IRModule":
        funcs = dict(self.functions)
        funcs[name] = func
        return IRModule(funcs, self.attrs)

    def without_function(self, name: str) -> "IRModule":
        return IRModule({k: v for k, v in self.functions.items() if k != name}, self.attrs)

    def show(self) -> None:
        """Print the module as script text."""
        print(self.script())

    __hash__ = object.__hash__
