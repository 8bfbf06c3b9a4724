"""The imports of kaio point one way (docs: design "Layering"): the module graph, read from the
source with every import counted (function-level ones too, only ``if TYPE_CHECKING:`` blocks
left out, as they never run), has no cycle inside the runtime, inside the simulator, inside the
frontend, nor between the frontend and ``kaio.runtime.launch``."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import kaio
import kaio.dialects
import kaio.ops_library
import kaio.passes
import kaio.targets

PACKAGES = [kaio, kaio.dialects, kaio.passes, kaio.targets, kaio.ops_library]

# Imports that load a plugin by its name rather than depend on it: the graph leaves them out.
# The one there is: the op modules never import the torch layer (the torch.ops.kaio custom ops,
# above them), and an op's first call with torch tensors loads it, in
# ``kaio.ops_library.autograd.kaio_ops``; the torch-layer tests below check that it is the only
# import of that layer from below.
PLUGIN_LOADS = {("kaio.ops_library.autograd", "kaio.ops_library.torch_registration")}
TORCH_REGISTRATION = "kaio.ops_library.torch_registration"


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        root = Path(package.__file__).parent
        for path in root.rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found.setdefault(".".join([package.__name__, *parts]), path)
    return found


def _imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The kaio modules ``name`` imports (an ``import a.b.c`` of a name resolves to its module)."""
    tree = ast.parse(path.read_text())
    type_only = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
        for statement in block.body
        for node in ast.walk(statement)
    }
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    deps: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            module = (
                ".".join(base + [node.module] if node.module else base)
                if node.level
                else node.module or ""
            )
            submodules = [
                f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in modules
            ]
            targets = submodules if len(submodules) == len(node.names) else [module, *submodules]
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                deps.add(target)
    return deps


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            nxt = next((w for w in edges if w not in index or w in on_stack), None)
            if nxt is not None:
                if nxt in index:
                    low[node] = min(low[node], index[nxt])
                else:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _graph(keep: list[str], plugins: bool = False) -> dict[str, set[str]]:
    """The import graph restricted to modules named by (or under) one of ``keep``; the
    ``PLUGIN_LOADS`` edges in it only when ``plugins`` is set."""
    modules = _modules()

    def kept(name: str) -> bool:
        return any(name == k or name.startswith(k + ".") for k in keep)

    return {
        name: {d for d in _imported(name, path, modules) if kept(d) and (plugins or (name, d) not in PLUGIN_LOADS)}
        for name, path in modules.items()
        if kept(name)
    }


def test_the_graph_sees_function_level_imports_and_cycles() -> None:
    # the checker itself: a lazy import inside a function counts, a cycle is reported
    assert (
        "kaio.runtime.launch" in _graph(["kaio.frontend", "kaio.runtime"])["kaio.frontend.kernel"]
    )
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_frontend_and_runtime_launch_import_one_way() -> None:
    graph = _graph(["kaio.frontend", "kaio.runtime.launch"])
    assert not [c for c in _cycles(graph) if "kaio.runtime.launch" in c]
    assert not graph["kaio.runtime.launch"], "the runtime knows kernels by their signature only"


# the compiler of one function: mixins over CompilerBase, composed once in function_compiler
FRONTEND_PARTS = ("kaio.frontend.expressions", "kaio.frontend.statements", "kaio.frontend.loops")


def _reaches(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for d in graph.get(todo.pop(), ()):
            if d not in seen:
                seen.add(d)
                todo.append(d)
    return seen


def _part_imports(graph: dict[str, set[str]], parts: tuple[str, ...]) -> list[tuple[str, str]]:
    """Edges from a compiler part to another part, or to a module that imports one, directly or
    not (the composition, and what uses it: device functions, kernels, tile kernels)."""
    return sorted((p, d) for p in parts for d in graph[p] if d in parts or _reaches(graph, d) & set(parts))


def test_frontend_modules_import_one_way() -> None:
    # call_handler once imported builtins and inline inside the function, inline imported kernel
    # to refuse a kernel calling a kernel: callees are now registered in call_handlers' table,
    # kernels too, and the mixins composed in one class
    graph = _graph(["kaio.frontend"])
    assert _cycles(graph) == []
    assert "kaio.frontend.call_handlers" in graph["kaio.frontend.expressions"]
    assert _part_imports(graph, FRONTEND_PARTS) == []


def test_the_frontend_rules_catch_a_planted_import(tmp_path: Path) -> None:
    modules = _modules()
    planted = tmp_path / "expressions.py"
    planted.write_text(
        modules["kaio.frontend.expressions"].read_text()
        + "\n\ndef _late():\n    from kaio.frontend.inline import device_call_handler\n"
    )
    graph = _graph(["kaio.frontend"])
    graph["kaio.frontend.expressions"] = {
        d for d in _imported("kaio.frontend.expressions", planted, modules) if d.startswith("kaio.frontend")
    }
    assert any("kaio.frontend.expressions" in c and "kaio.frontend.inline" in c for c in _cycles(graph))
    assert _part_imports(graph, FRONTEND_PARTS) == [("kaio.frontend.expressions", "kaio.frontend.inline")]
    # a part importing a sibling, or a user of the composition
    parts = {"p.a": {"p.base"}, "p.b": {"p.a", "p.user"}, "p.user": {"p.all"}, "p.all": {"p.a", "p.b"}, "p.base": set()}
    assert _part_imports(parts, ("p.a", "p.b")) == [("p.b", "p.a"), ("p.b", "p.user")]


def test_the_function_compiler_provides_what_its_parts_ask_of_each_other() -> None:
    # CompilerBase declares what one mixin calls on another; the composition must define each
    from kaio.frontend.context import CompilerBase
    from kaio.frontend.function_compiler import FunctionCompiler

    base = next(
        node for node in ast.walk(ast.parse(Path(inspect.getfile(CompilerBase)).read_text()))
        if isinstance(node, ast.ClassDef) and node.name == "CompilerBase"
    )  # fmt: skip
    declared = {
        f.name for f in base.body
        if isinstance(f, ast.FunctionDef) and ast.unparse(f.body[-1]) == "raise NotImplementedError"
    }  # fmt: skip
    assert {"eval", "visit_body", "lookup", "store"} <= declared
    assert [n for n in sorted(declared) if getattr(FunctionCompiler, n) is vars(CompilerBase)[n]] == []


def test_runtime_modules_import_one_way() -> None:
    assert _cycles(_graph(["kaio.runtime"])) == []


def test_simulator_modules_import_one_way() -> None:
    assert _cycles(_graph(["kaio.targets.sim"])) == []


def test_ptx_dialect_families_import_only_the_base() -> None:
    graph = _graph(["kaio.dialects"])
    # leaf helpers (construction, traits, the modifier grammar) import no dialect, so they add no
    # edge between families
    leaves = {m for m, deps in graph.items() if not any(d.startswith("kaio.dialects.") for d in deps)}
    assert {"kaio.dialects.plain_init", "kaio.dialects.isolated_from_above", "kaio.dialects.ptx_grammar"} <= leaves
    families = [
        m for m in graph
        if m.startswith("kaio.dialects.ptx_") and m not in ("kaio.dialects.ptx_base", "kaio.dialects.ptx_grammar")
    ]
    assert len(families) >= 8
    for family in families:
        assert "kaio.dialects.ptx_base" in graph[family], family
        assert graph[family] - leaves == {"kaio.dialects.ptx_base"}, family
    assert _cycles(graph) == []


def _pass_modules(modules: dict[str, Path]) -> set[str]:
    """The modules under kaio.passes that define a ModulePass subclass."""
    found = set()
    for name, path in modules.items():
        if not name.startswith("kaio.passes."):
            continue
        tree = ast.parse(path.read_text())
        if any(
            isinstance(node, ast.ClassDef) and any(ast.unparse(base).endswith("ModulePass") for base in node.bases)
            for node in ast.walk(tree)
        ):
            found.add(name)
    return found


def _pass_imports(graph: dict[str, set[str]], passes: set[str]) -> list[tuple[str, str]]:
    """Edges into a pass module from any module under kaio.passes but the registry package."""
    return sorted(
        (m, d) for m, deps in graph.items() if m != "kaio.passes" for d in deps if d in passes and d != m
    )


def test_no_pass_module_imports_another_nor_does_a_pass_utility() -> None:
    # stage contracts live in kaio.dialects.stage_attrs, shared helpers in utility modules
    # (value_facts, stage_rings, element_types, ...): a pass depends on dialects and
    # utilities, never on another pass; only the registry (kaio.passes) names them all
    modules = _modules()
    passes = _pass_modules(modules)
    assert {"kaio.passes.tile_layout", "kaio.passes.lower_to_ptx", "kaio.passes.pipeline_tma"} <= passes
    assert _pass_imports(_graph(["kaio.passes"]), passes) == []


def test_the_pass_rule_catches_a_planted_import() -> None:
    graph = {"kaio.passes.a": {"kaio.passes.b"}, "kaio.passes.util": {"kaio.passes.b"}, "kaio.passes": {"kaio.passes.b"}}
    assert _pass_imports(graph, {"kaio.passes.a", "kaio.passes.b"}) == [
        ("kaio.passes.a", "kaio.passes.b"),
        ("kaio.passes.util", "kaio.passes.b"),
    ]


def test_the_passes_and_dialects_form_no_cycle_with_kaio_s_own_modules() -> None:
    # pass -> pass_contracts -> pass_registry -> kaio.passes -> pass was one: the registry is
    # handed to the contract checks instead
    graph = _graph(["kaio"])
    cycles = [c for c in _cycles(graph) if any(m.startswith(("kaio.passes", "kaio.dialects")) for m in c)]
    assert cycles == []


def test_the_runtime_imports_neither_the_frontend_nor_the_compiler() -> None:
    graph = _graph(["kaio"])
    wrong = sorted(
        (m, d)
        for m, deps in graph.items()
        if m.startswith("kaio.runtime")
        for d in deps
        if d.startswith("kaio.frontend") or d in ("kaio.compiler", "kaio.module_compiler", "kaio.pass_manager", "kaio.pipeline")
    )
    assert wrong == []


def test_no_pass_or_lowering_module_imports_another_modules_private_names() -> None:
    # a helper two files need is public in the file that owns it (passes/to_ptx is laid out by
    # op family; tile_distribution holds the layout arithmetic the others share)
    found = []
    for name, path in _modules().items():
        if not name.startswith("kaio.passes"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kaio"):
                found += [(name, node.module, a.name) for a in node.names if a.name.startswith("_")]
    assert found == []


def _torch_layer(graph: dict[str, set[str]]) -> set[str]:
    """The torch layer: ``kaio.torch``, the registration list and the modules it names."""
    return {"kaio.torch", TORCH_REGISTRATION, *graph[TORCH_REGISTRATION]}


def _torch_layer_imports(graph: dict[str, set[str]], layer: set[str]) -> list[tuple[str, str]]:
    """Edges into the torch layer from a module outside it."""
    return sorted((m, d) for m, deps in graph.items() if m not in layer for d in deps if d in layer)


def _imports_torch_at_module_level(path: Path) -> bool:
    return any(
        isinstance(node, ast.Import | ast.ImportFrom)
        and any((getattr(node, "module", None) or a.name).split(".")[0] == "torch" for a in node.names)
        for node in ast.parse(path.read_text()).body
    )


def test_the_ops_library_and_kaio_torch_form_no_cycle() -> None:
    # torch_ops imported its backward modules for their side effects and they imported it back;
    # the ops imported torch_ops (and kaio.torch) to register the custom ops on a first torch
    # call: the layer is loaded through autograd.kaio_ops, a plugin load, instead
    assert _cycles(_graph(["kaio.ops_library", "kaio.torch"])) == []


def test_no_op_module_imports_the_torch_layer() -> None:
    graph = _graph(["kaio"], plugins=True)
    layer = _torch_layer(graph)
    assert {"kaio.ops_library.torch_ops", "kaio.ops_library.matmul_torch", "kaio.ops_library.norms_autograd"} <= layer
    # a module of kaio.ops_library that imports torch is a torch-layer module, named in the list
    modules = _modules()
    with_torch = {m for m, path in modules.items() if m.startswith("kaio.ops_library.") and _imports_torch_at_module_level(path)}
    assert with_torch == layer - {"kaio.torch"}
    # the ops know the layer through the one plugin load only, and the layer's modules are
    # imported by the list alone (not by each other, nor by kaio.torch)
    assert _torch_layer_imports(graph, layer) == sorted(PLUGIN_LOADS)
    inside = sorted((m, d) for m in layer for d in graph[m] & layer if m != TORCH_REGISTRATION)
    assert inside == [("kaio.torch", TORCH_REGISTRATION)]


def test_the_torch_layer_rule_catches_a_planted_import() -> None:
    graph = {
        "kaio.ops_library.rows": {"kaio.ops_library.torch_ops"},  # the lazy import this replaced
        "kaio.ops_library.softmax": {"kaio.ops_library.rows"},
        "kaio.ops_library.matmul": {"kaio.torch"},
        TORCH_REGISTRATION: {"kaio.ops_library.torch_ops"},
        "kaio.ops_library.torch_ops": {"kaio.ops_library.softmax"},
        "kaio.torch": {TORCH_REGISTRATION},
    }
    layer = _torch_layer(graph)
    assert layer == {"kaio.torch", TORCH_REGISTRATION, "kaio.ops_library.torch_ops"}
    assert _torch_layer_imports(graph, layer) == [
        ("kaio.ops_library.matmul", "kaio.torch"),
        ("kaio.ops_library.rows", "kaio.ops_library.torch_ops"),
    ]


def _loads_by_name(sources: dict[str, str]) -> set[tuple[str, str]]:
    """(module, argument) of every ``importlib.import_module`` / ``__import__`` call in the
    modules' sources: imports the graph cannot follow."""
    found = set()
    for name, source in sources.items():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Call) and ast.unparse(node.func) in ("importlib.import_module", "import_module", "__import__"):
                found.add((name, ast.unparse(node.args[0])))
    return found


def test_the_torch_layer_is_loaded_by_name_nowhere_else() -> None:
    # a string naming the layer would hide an edge from the graph: every load by name is
    # listed here, and those reading a table of module names get the table checked
    sources = {name: path.read_text() for name, path in _modules().items()}
    assert _loads_by_name(sources) == {
        ("kaio", "'kaio.torch'"),  # the umbrella's lazy attribute kaio.torch: the public module
        ("kaio", "module"),  # the umbrella's other lazy names: kaio._LAZY
        ("kaio.ops_library", "f'{__name__}.{module}'"),  # the lazy ops: kaio.ops_library._OPS
        ("kaio.hwcheck.environment", "name"),  # third-party packages it reports the versions of
        ("kaio.tools.kaio_aot", "module_name"),  # the user's module, named on the command line
    }
    layer = _torch_layer(_graph(["kaio"]))
    assert not {module for module, _ in kaio._LAZY.values()} & layer
    assert not {f"kaio.ops_library.{module}" for module in kaio.ops_library._OPS.values()} & layer
    planted = {"kaio.ops_library.rows": "def torch_op():\n    importlib.import_module('kaio.ops_library.torch_ops')\n"}
    assert _loads_by_name(planted) == {("kaio.ops_library.rows", "'kaio.ops_library.torch_ops'")}


def test_kaio_s_modules_form_no_cycle_anywhere() -> None:
    # every package, function-level imports counted; the one load of the torch layer by the
    # op layer (PLUGIN_LOADS) is its plugin entry, checked alone by the torch-layer tests
    assert _cycles(_graph(["kaio"])) == []
