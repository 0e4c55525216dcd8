"""From script text to IR: the module-level machinery shared by every function kind.

The parser reads Python source through ``ast`` and interprets it; the user's code is never
executed. A module is a class decorated ``@kiln.script.ir_module`` whose methods each carry a
function-kind decorator; a dispatch table maps that decorator to the parser of the kind
(``T.prim_func`` -> tensor programs today; graph functions, ``R.function``, plug in the same way
with ``register_function_kind``).

Errors raise ``ScriptError`` with the line number in the user's file (for decorated code) or
in the text, the offending source line, and what was expected.
"""
from __future__ import annotations

import ast
import functools
import inspect
import linecache
import sys
import textwrap
from typing import Callable, Dict, List, Optional

from ..ir.expr import Node
from ..ir.function import IRModule


class ScriptError(ValueError):
    """A script that does not parse: ``line N: <what was expected, what was found>`` followed by
    the source line. Attributes: ``message``, ``lineno``, ``source_line``, ``filename``."""

    def __init__(self, message: str, lineno: Optional[int] = None,
                 source_line: Optional[str] = None, filename: Optional[str] = None):
        where = f"line {lineno}" if lineno else ""
        if where and filename and not filename.startswith("<"):
            where = f"{filename}, {where}"
        text = f"{where}: {message}" if where else message
        if source_line and source_line.strip():
            text += f"\n    {source_line.strip()}"
        super().__init__(text)
        self.message, self.lineno, self.source_line, self.filename = message, lineno, source_line, filename


class Source:
    """Script text and where it came from, to report errors in the user's coordinates."""

    def __init__(self, text: str, filename: str = "<script>", line_offset: int = 0):
        self.text, self.filename, self.line_offset = text, filename, line_offset
        self.lines = text.splitlines()

    @staticmethod
    def of(obj) -> "Source":
        """The source of a class or function (dedented), with its place in its file."""
        try:
            lines, start = _class_source(obj) or inspect.getsourcelines(obj)
            filename = inspect.getsourcefile(obj) or "<unknown>"
        except (OSError, TypeError) as e:
            raise ScriptError(f"cannot read the source of {getattr(obj, '__qualname__', obj)!r} ({e}); "
                              "define it in a file, or pass the text to kiln.script.parse") from None
        return Source(textwrap.dedent("".join(lines)), filename, max(start - 1, 0))

    def error(self, node, message: str) -> ScriptError:
        ln = getattr(node, "lineno", None)
        line = self.lines[ln - 1] if ln and ln <= len(self.lines) else None
        return ScriptError(message, ln + self.line_offset if ln else None, line, self.filename)

    def parse_ast(self) -> ast.Module:
        try:
            return ast.parse(self.text, self.filename)
        except SyntaxError as e:
            line = self.lines[e.lineno - 1] if e.lineno and e.lineno <= len(self.lines) else None
            raise ScriptError(f"invalid Python syntax: {e.msg}", (e.lineno or 0) + self.line_offset,
                              line, self.filename) from None


def _class_source(obj):
    """``(lines, first line number)`` of class ``obj``'s source, as ``inspect.getsourcelines``
    gives them, or None to let inspect find it. Before Python 3.13, inspect parses the whole
    file again for every class it looks up; a test file with dozens of ``@ir_module`` classes
    took seconds to import. Here each file's text is parsed once."""
    if not isinstance(obj, type) or hasattr(obj, "__firstlineno__"):
        return None
    filename = inspect.getsourcefile(obj)
    module = sys.modules.get(obj.__module__)
    lines = linecache.getlines(filename, module.__dict__ if module else None) if filename else []
    if not lines:
        return None
    lnum = _class_starts(filename, "".join(lines)).get(obj.__qualname__)
    if lnum is None:
        return None
    return inspect.getblock(lines[lnum:]), lnum + 1


@functools.lru_cache(maxsize=16)
def _class_starts(filename: str, text: str) -> Dict[str, int]:
    """Qualified name -> 0-based first line (its first decorator's) of every class in ``text``,
    named as inspect names them (functions add ``<locals>``)."""
    starts: Dict[str, int] = {}
    try:
        tree = ast.parse(text, filename)
    except SyntaxError:
        return starts

    def visit(node, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                name = prefix + child.name
                first = child.decorator_list[0].lineno if child.decorator_list else child.lineno
                starts.setdefault(name, first - 1)
                visit(child, name + ".")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, prefix + child.name + ".<locals>.")
            else:
                visit(child, prefix)
    visit(tree, "")
    return starts


def dotted(node) -> Optional[str]:
    """``T.axis.spatial`` for the AST of that attribute chain (None for anything else)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def brief(node, limit: int = 60) -> str:
    """Short source text of an AST node, for error messages."""
    text = ast.unparse(node)
    return text if len(text) <= limit else text[:limit - 3] + "..."


# ---- function kinds --------------------------------------------------------------------------
class ModuleContext:
    """What a function-kind parser sees of the module being parsed: the source, the names of
    all its functions (so functions can refer to each other) and those parsed so far."""

    def __init__(self, source: Source, name: str, function_names: List[str]):
        self.source, self.name, self.function_names = source, name, function_names
        self.functions: Dict[str, Node] = {}


# decorator (as written, e.g. "T.prim_func") -> parser(ctx, FunctionDef, decorator kwargs) -> Node
FUNCTION_KINDS: Dict[str, Callable[[ModuleContext, ast.FunctionDef, dict], Node]] = {}


def register_function_kind(decorator: str, parser: Callable[[ModuleContext, ast.FunctionDef, dict], Node]) -> None:
    """Plug in a function kind: functions decorated ``@<decorator>`` (or ``@<decorator>(...)``,
    or with a dotted prefix such as ``kiln.script.<decorator>``) are parsed by
    ``parser(ctx, function_def, kwargs)``, where ``kwargs`` holds the decorator's keyword
    arguments (Python literals) except ``name``, which the module uses to name the function."""
    FUNCTION_KINDS[decorator] = parser


def _function_kind(src: Source, fdef: ast.FunctionDef):
    for deco in fdef.decorator_list:
        name = dotted(deco.func if isinstance(deco, ast.Call) else deco)
        for key, parser in FUNCTION_KINDS.items():
            if name == key or (name or "").endswith("." + key):
                kwargs = {}
                if isinstance(deco, ast.Call):
                    if deco.args:
                        raise src.error(deco, f"@{key}(...) takes keyword arguments only")
                    for kw in deco.keywords:
                        try:
                            kwargs[kw.arg] = ast.literal_eval(kw.value)
                        except ValueError:
                            raise src.error(kw.value, f"decorator argument {kw.arg}= must be a "
                                            f"literal, got {brief(kw.value)}") from None
                return parser, kwargs
    kinds = " or ".join("@" + k for k in FUNCTION_KINDS)
    raise src.error(fdef, f"function {fdef.name!r} needs a function-kind decorator ({kinds})")


def _parse_function(ctx: ModuleContext, fdef: ast.FunctionDef):
    parser, kwargs = _function_kind(ctx.source, fdef)
    name = kwargs.pop("name", fdef.name)
    return name, parser(ctx, fdef, kwargs)


def _is_ir_module(deco) -> bool:
    name = dotted(deco.func if isinstance(deco, ast.Call) else deco) or ""
    return name == "ir_module" or name.endswith(".ir_module")


def _parse_class(src: Source, cdef: ast.ClassDef) -> IRModule:
    if not any(_is_ir_module(d) for d in cdef.decorator_list):
        raise src.error(cdef, f"class {cdef.name!r} needs the decorator @kiln.script.ir_module")
    funcs, attrs = [], {}
    for node in cdef.body:
        if isinstance(node, ast.FunctionDef):
            funcs.append(node)
        elif isinstance(node, ast.Pass) or (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                                            and isinstance(node.value.value, str)):
            continue
        elif (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
              and (dotted(node.value.func) or "").endswith("module_attrs")):
            try:
                attrs.update(ast.literal_eval(node.value.args[0]))
            except (ValueError, IndexError, TypeError):
                raise src.error(node, "module_attrs takes one dict of literals") from None
        else:
            raise src.error(node, f"expected a decorated function in class {cdef.name!r}, got {brief(node)}")
    ctx = ModuleContext(src, cdef.name, [f.name for f in funcs])
    for fdef in funcs:
        name, func = _parse_function(ctx, fdef)
        if name in ctx.functions:
            raise src.error(fdef, f"module {cdef.name!r} defines function {name!r} twice")
        ctx.functions[name] = func
    return IRModule(ctx.functions, attrs)


def _parse_tree(src: Source, tree: ast.Module):
    defs = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom, ast.Pass)) or (
                isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
            continue
        if isinstance(node, ast.ClassDef):
            defs.append((node.name, _parse_class(src, node)))
        elif isinstance(node, ast.FunctionDef):
            defs.append(_parse_function(ModuleContext(src, "", [node.name]), node))
        else:
            raise src.error(node, "expected a @kiln.script.ir_module class or a @T.prim_func "
                            f"function, got {brief(node)}")
    if not defs:
        raise ScriptError("the script defines no module and no function")
    if len(defs) == 1:
        return defs[0][1]
    if any(isinstance(d, IRModule) for _, d in defs):
        raise ScriptError("a script holds one @kiln.script.ir_module class, or functions only")
    return IRModule(dict(defs))


def parse(text: str, filename: str = "<script>", metadata: Optional[dict] = None):
    """Parse script text: an ``IRModule`` for a ``@kiln.script.ir_module`` class, the function
    node (``PrimFunc``) for a single decorated function, an ``IRModule`` for several functions.
    ``metadata`` holds the large constants the text names as ``metadata["key"]``
    (``kiln.script.metadata(original)``).

    >>> mod = parse(MyModule.script())          # doctest: +SKIP
    """
    src = Source(text, filename)
    src.metadata = dict(metadata or {})
    try:
        return _parse_tree(src, src.parse_ast())
    except ScriptError as e:
        raise e.with_traceback(None) from None  # the parser's own frames are noise to the user


def parse_object(obj):
    """Parse a decorated class or function from its source (what the decorators call)."""
    try:
        src = Source.of(obj)
        tree = src.parse_ast()
        node = tree.body[0] if tree.body else None
        if isinstance(node, ast.ClassDef):
            return _parse_class(src, node)
        if isinstance(node, ast.FunctionDef):
            return _parse_function(ModuleContext(src, "", [node.name]), node)[1]
        raise ScriptError(f"cannot parse {obj!r}: its source is not a class or function")
    except ScriptError as e:
        raise e.with_traceback(None) from None


def in_class_body(func) -> bool:
    """True for a function defined directly in a class body (a module method): the module
    decorator parses those, with the whole class in view."""
    parts = getattr(func, "__qualname__", "").split(".")
    return len(parts) >= 2 and parts[-2] != "<locals>"


def ir_module(cls) -> IRModule:
    """Class decorator: the class's decorated methods become the functions of an ``IRModule``.

    >>> @kiln.script.ir_module                   # doctest: +SKIP
    ... class MyModule:
    ...     @T.prim_func
    ...     def main(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")): ...
    """
    if not isinstance(cls, type):
        raise TypeError(f"@kiln.script.ir_module decorates a class, got {type(cls).__name__}")
    return parse_object(cls)


def module_attrs(attrs: dict) -> None:
    """Module attributes, written in a module's class body: ``kiln.script.module_attrs({...})``.
    Read by the parser; does nothing when Python runs the class body."""
    del attrs
