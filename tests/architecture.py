"""The import graph of the project's packages, read from the source (never by importing it).

Every ``import`` and ``from … import`` counts, at module level and inside functions alike, so a
deferred import cannot hide a cycle or an upward edge. ``check`` returns one line per problem:

* a **cycle** among modules (reported once, as the modules in order);
* an import of a **package that is not below** the importer's (``PACKAGES``: which top-level
  packages each one may use);
* an **upward import** between the layers of one package (``LAYERS``: lowest first; a module
  belongs to the layer of the longest prefix that names it; every module must belong to one);
* a **deferred import that is not allowed**: an import inside a function of one of our modules is
  accepted only where it keeps torch out of torch-free code (the imported module needs torch,
  the importer does not), keeps command start-up fast (the importer is a command module), or is
  one of the few (importer, imported) pairs listed as keeping a light command's start-up light
  (``light``: the test names each and says why);
* (imports under ``if TYPE_CHECKING:`` never run and are not counted; nor do the **lazy exports**
  of a package: imports inside its ``__init__``'s module-level ``__getattr__`` (PEP 562), which
  run only when a user reads that name on the package, so they place the package's public face
  above its modules without making it a cycle; they still obey the package rule);
* a module found by **name in a string** (``importlib.import_module("trainer.x")``), which hides
  an edge from every reader.

Written for this test because the well-kept tools either import the code (pydeps, grimp needs
an installed graph and has no rule for deferred imports) or check contracts without the
deferral rule (import-linter).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

HEAVY = ("torch", "transformers", "vllm")  # what "torch-free" code must not load at import time


@dataclass
class Module:
    name: str
    path: Path
    is_package: bool
    top: set[str] = field(default_factory=set)  # our modules imported at module level
    deferred: dict[str, int] = field(default_factory=dict)  # ours, inside a function: name -> line
    lines: dict[str, int] = field(default_factory=dict)  # first line of each edge
    heavy_top: bool = False  # imports torch/transformers/vllm at module level
    strings: list[tuple[str, int]] = field(default_factory=list)  # importlib strings naming ours
    lazy: dict[str, int] = field(default_factory=dict)  # ours, in a package's __getattr__: name -> line


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _resolve(mod: Module, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = mod.name.split(".") if mod.is_package else mod.name.split(".")[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _targets(node: ast.AST, mod: Module, known: set[str]) -> list[str]:
    """Our modules an import statement loads (the named module, and ``from pkg import module``)."""
    out: list[str] = []
    if isinstance(node, ast.Import):
        for a in node.names:
            name = a.name
            while name and name not in known:  # `import a.b.c` of a non-module attribute path
                name = name.rpartition(".")[0]
            if name:
                out.append(name)
    elif isinstance(node, ast.ImportFrom):
        base = _resolve(mod, node)
        subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known]
        if base in known and len(subs) < len(node.names):  # names taken from the module itself
            out.append(base)
        out.extend(subs)
    return out


def _heavy(node: ast.AST, mod: Module) -> bool:
    if isinstance(node, ast.Import):
        return any(a.name.split(".")[0] in HEAVY for a in node.names)
    if isinstance(node, ast.ImportFrom) and not node.level:
        return (node.module or "").split(".")[0] in HEAVY
    return False


class _Visitor(ast.NodeVisitor):
    def __init__(self, mod: Module, known: set[str]) -> None:
        self.mod, self.known, self.depth, self.in_lazy = mod, known, 0, False

    def _function(self, node: ast.AST) -> None:
        lazy = self.mod.is_package and self.depth == 0 and getattr(node, "name", "") == "__getattr__"
        self.depth += 1
        self.in_lazy |= lazy
        self.generic_visit(node)
        self.in_lazy &= not lazy
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_If(self, node: ast.If) -> None:
        t = node.test
        if (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
                isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"):
            for child in node.orelse:  # the body never runs; only annotations read it
                self.visit(child)
            return
        self.generic_visit(node)

    def _import(self, node: ast.Import | ast.ImportFrom) -> None:
        if self.depth == 0 and _heavy(node, self.mod):
            self.mod.heavy_top = True
        for t in _targets(node, self.mod, self.known):
            if t == self.mod.name:
                continue
            self.mod.lines.setdefault(t, node.lineno)
            if self.in_lazy:
                self.mod.lazy.setdefault(t, node.lineno)
            elif self.depth == 0:
                self.mod.top.add(t)
            else:
                self.mod.deferred.setdefault(t, node.lineno)

    visit_Import = visit_ImportFrom = _import

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        if name in ("import_module", "__import__") and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                if arg.value.split(".")[0] in {k.split(".")[0] for k in self.known}:
                    self.mod.strings.append((arg.value, node.lineno))
        self.generic_visit(node)


def scan(root: Path, packages: Iterable[str]) -> dict[str, Module]:
    """Parse every module of ``packages`` under ``root`` into its import edges."""
    mods: dict[str, Module] = {}
    for pkg in {p.split(".")[0] for p in packages}:  # a sub-package key is scanned with its package
        for p in sorted((root / pkg).rglob("*.py")):
            name = module_name(root, p)
            mods[name] = Module(name, p, p.name == "__init__.py")
    known = set(mods)
    for m in mods.values():
        _Visitor(m, known).visit(ast.parse(m.path.read_text(), filename=str(m.path)))
    return mods


def cycles(mods: Mapping[str, Module]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def edges(v: str) -> list[str]:
        return sorted((mods[v].top | set(mods[v].deferred)) & set(mods))

    def strong(v: str) -> None:  # iterative, so deep graphs cannot exhaust the recursion limit
        work = [(v, iter(edges(v)))]
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(edges(w))))
                    break
                if w in on:
                    low[node] = min(low[node], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == node:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))

    for v in sorted(mods):
        if v not in index:
            strong(v)
    return sorted(out)


def _names(entry: str, name: str) -> bool:
    if entry.endswith(".__init__"):  # the package's own module only
        return name == entry.removesuffix(".__init__")
    if entry.endswith("*"):  # a name prefix: "figures.build_*"
        return name.startswith(entry[:-1])
    return name == entry or name.startswith(entry + ".")  # a module, or a package and all below it


def owner(name: str, packages: Iterable[str]) -> str:
    """The key of ``PACKAGES`` a module belongs to: the longest one naming it (``a.b`` names
    ``a.b`` and ``a.b.c``), else its top-level package. A sub-package given its own key (the
    integrations, which sit above the trainer) is a package of its own for the rules."""
    best = name.split(".")[0]
    for key in packages:
        if (name == key or name.startswith(key + ".")) and len(key) > len(best):
            best = key
    return best


def layer_of(name: str, layers: Sequence[tuple[str, Sequence[str]]]) -> int | None:
    """Index of the layer whose longest entry names the module (``a.b`` names ``a.b`` and
    ``a.b.c``; ``a.__init__`` names the package ``a`` alone; ``a.x*`` names ``a.x…``)."""
    best, best_len = None, -1
    for i, (_, entries) in enumerate(layers):
        for e in entries:
            if _names(e, name) and len(e) > best_len:
                best, best_len = i, len(e)
    return best


def needs_heavy(mods: Mapping[str, Module]) -> set[str]:
    """Modules that load torch/transformers/vllm when imported (module-level edges, transitively)."""
    heavy = {n for n, m in mods.items() if m.heavy_top}
    changed = True
    while changed:
        changed = False
        for n, m in mods.items():
            if n not in heavy and m.top & heavy:
                heavy.add(n)
                changed = True
    return heavy


def check(mods: Mapping[str, Module], *, packages: Mapping[str, Sequence[str]],
          layers: Mapping[str, Sequence[tuple[str, Sequence[str]]]],
          commands: Sequence[str] = (), light: Iterable[tuple[str, str]] = ()) -> list[str]:
    """Every violation of the import rules, one line each (empty: the graph is clean)."""
    problems: list[str] = []
    for comp in cycles(mods):
        problems.append("cycle: " + " -> ".join(comp))
    heavy = needs_heavy(mods)
    light = set(light)
    for name, m in sorted(mods.items()):
        top = owner(name, packages)
        own_layers = layers.get(top, ())
        mine = layer_of(name, own_layers) if own_layers else None
        if own_layers and mine is None:
            problems.append(f"{name}: in no layer of {top} (add it to the layer table)")
        for target in sorted(m.top | set(m.deferred)):
            line = m.lines[target]
            ttop = owner(target, packages)
            if ttop != top and ttop not in packages.get(top, ()):
                problems.append(f"{name}:{line}: imports {target}: {top} may not use {ttop}")
                continue
            if ttop == top and own_layers and mine is not None:
                theirs = layer_of(target, own_layers)
                if theirs is not None and theirs > mine:
                    problems.append(f"{name}:{line}: imports {target}: upward, from layer "
                                    f"'{own_layers[mine][0]}' to '{own_layers[theirs][0]}'")
            if target in m.deferred and target not in m.top:
                keeps_torch_out = target in heavy and name not in heavy
                if not keeps_torch_out and name not in commands and (name, target) not in light:
                    problems.append(f"{name}:{m.deferred[target]}: imports {target} inside a function; "
                                    "allowed only to keep torch out of torch-free code or in a command module")
        for target in sorted(set(m.lazy) - m.top - set(m.deferred)):
            ttop = owner(target, packages)
            if ttop != top and ttop not in packages.get(top, ()):
                problems.append(f"{name}:{m.lazy[target]}: imports {target}: {top} may not use {ttop}")
        for s, line in m.strings:
            problems.append(f"{name}:{line}: names module {s!r} in a string; import it instead")
    return problems


def long_modules(mods: Mapping[str, Module], max_lines: int) -> list[str]:
    """Modules over ``max_lines`` whose docstring does not say why (a sentence with "lines")."""
    out = []
    for m in mods.values():
        text = m.path.read_text()
        n = len(text.splitlines())
        if n > max_lines and "lines" not in (ast.get_docstring(ast.parse(text)) or ""):
            out.append(f"{m.name}: {n} lines")
    return sorted(out)


def missing_from_doc(root: Path, package: str, doc: str) -> list[str]:
    """Modules of ``package`` that ``doc`` does not name: a module by its name in backticks and,
    inside a folder, the folder too (`` `folder/` ``, or a path ending so); a folder's
    ``__init__`` by the folder. Code blocks do not count."""
    doc = re.sub(r"```.*?```", "", doc, flags=re.S)
    names = set(re.findall(r"`([^`\n]+)`", doc))
    out = []
    for p in sorted((root / package).rglob("*.py")):
        rel = p.relative_to(root / package)
        folder = "/".join(rel.parts[:-1]) + "/" if len(rel.parts) > 1 else None
        has_folder = folder is None or any(n == folder or n.endswith("/" + folder) for n in names)
        named = has_folder if rel.name == "__init__.py" and folder else has_folder and rel.stem in names
        if not named:
            out.append(rel.as_posix())
    return out
