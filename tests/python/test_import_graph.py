"""The import graph of python/hora: no cycles, and the layers of
docs/python.md (framework adapters above hora.common, which never imports
them; hora.runner below both).

Every import statement counts, at module level or inside a function, absolute
or relative: a function-level import is a cycle that only waits for the call
that closes it. The graph is read from the sources with ``ast``, so nothing
is imported and no framework needs to be installed."""

import ast
import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.join(os.path.dirname(os.path.dirname(HERE)), "python", "hora")

# The front ends on hora.common; nothing below them imports one.
FRONT_ENDS = ("hora.torch", "hora.tensorflow", "hora.keras", "hora.mxnet", "hora.numpy")
# Below the front ends: the framework-free layers, each listed with what it
# must never import (docs/python.md, "Layers").
FORBIDDEN = {
    "hora.common": FRONT_ENDS + ("hora.spark", "hora.ray"),
    "hora.runner": FRONT_ENDS + ("hora.spark", "hora.ray", "hora.common"),
    "hora.errors": FRONT_ENDS + ("hora.common", "hora.runner", "hora.spark", "hora.ray"),
}


def module_files(root=PACKAGE):
    """{dotted module name: path} of every module of the package."""
    modules = {}
    for folder, _, files in os.walk(root):
        for file in files:
            if not file.endswith(".py"):
                continue
            path = os.path.join(folder, file)
            parts = ["hora"] + os.path.relpath(path, root)[:-3].split(os.sep)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _absolute(module, is_package, node):
    """The module an ImportFrom names, with a relative one resolved."""
    if not node.level:
        return node.module
    base = module.split(".")
    if not is_package:
        base.pop()
    base = base[:len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(module, source, modules, is_package=False):
    """{imported module: line} for every import statement of ``source``, at
    any depth. ``from a import b`` imports the module ``a.b`` when there is
    one, else ``a``."""
    found = {}
    for node in ast.walk(ast.parse(source)):
        targets = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, is_package, node)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                targets.append(full if full in modules else base)
        for target in targets:
            if target in modules and target != module:
                found.setdefault(target, node.lineno)
    return found


def import_graph(root=PACKAGE):
    """{module: {imported module: line}} over the package's own modules."""
    modules = module_files(root)
    graph = {}
    for module, path in modules.items():
        with open(path, encoding="utf-8") as file:
            graph[module] = imports_of(module, file.read(), modules, path.endswith("__init__.py"))
    return graph


def cycles(graph):
    """The strongly connected components of more than one module (Tarjan),
    each as one cycle through it: a list of modules, the first repeated last."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def visit(start):
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return [_cycle_through(graph, component) for component in components]


def _cycle_through(graph, component):
    """A shortest cycle from the component's first module back to it."""
    members, start = set(component), component[0]
    paths, seen = [[start]], {start}
    while paths:
        path = paths.pop(0)
        for successor in sorted(graph[path[-1]]):
            if successor == start:
                return path + [start]
            if successor in members and successor not in seen:
                seen.add(successor)
                paths.append(path + [successor])
    raise AssertionError(f"no cycle through {component}")


def describe(graph, cycle):
    return " -> ".join(f"{a} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:])) + f" -> {cycle[-1]}"


def layer_violations(graph):
    """(module, imported module, line) for every import that points up."""
    found = []
    for module, imported in sorted(graph.items()):
        for layer, forbidden in FORBIDDEN.items():
            if module != layer and not module.startswith(layer + "."):
                continue
            for target, line in sorted(imported.items()):
                if any(target == f or target.startswith(f + ".") for f in forbidden):
                    found.append((module, target, line))
    return found


def test_the_package_has_no_import_cycle():
    graph = import_graph()
    found = cycles(graph)
    assert not found, "import cycles in python/hora:\n" + "\n".join(describe(graph, c) for c in found)


def test_layers_import_only_downward():
    found = layer_violations(import_graph())
    assert not found, "imports against the layers:\n" + "\n".join(
        f"{module} imports {target} (line {line})" for module, target, line in found)


# --- the checks find what they look for -------------------------------------------------

def write_package(root, files):
    for name, source in files.items():
        path = root / "hora" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    return str(root / "hora")


def test_a_cycle_through_a_function_level_relative_import_is_found(tmp_path):
    root = write_package(tmp_path, {
        "__init__.py": "",
        "common/__init__.py": "",
        "common/ops.py": "from hora.common import process_sets\n",
        "common/process_sets.py": "def barrier():\n    from . import ops\n    return ops\n",
        "common/basics.py": "import hora.common.ops\n",
    })
    graph = import_graph(root)
    found = cycles(graph)
    assert found == [["hora.common.ops", "hora.common.process_sets", "hora.common.ops"]]
    assert describe(graph, found[0]) == ("hora.common.ops (line 1) -> hora.common.process_sets (line 2) -> "
                                         "hora.common.ops")


def test_a_longer_cycle_through_a_package_is_found(tmp_path):
    root = write_package(tmp_path, {
        "__init__.py": "",
        "common/__init__.py": "",
        "common/basics.py": "from hora.common import elastic\n",
        "common/elastic.py": "def f():\n    import hora.numpy as hvd\n",
        "numpy/__init__.py": "from ..common.basics import init\n",
    })
    assert cycles(import_graph(root)) == [["hora.common.basics", "hora.common.elastic", "hora.numpy",
                                           "hora.common.basics"]]


def test_a_module_importing_its_own_packages_siblings_is_no_cycle(tmp_path):
    root = write_package(tmp_path, {
        "__init__.py": "",
        "torch/__init__.py": "from hora.torch.mpi_ops import allreduce\nfrom hora.torch import functions\n",
        "torch/mpi_ops.py": "allreduce = None\n",
        "torch/functions.py": "from hora.torch.mpi_ops import allreduce\n",
    })
    assert cycles(import_graph(root)) == []


def test_an_upward_import_is_found(tmp_path):
    root = write_package(tmp_path, {
        "__init__.py": "",
        "common/__init__.py": "",
        "common/elastic.py": "def f():\n    import hora.numpy\n",
        "numpy/__init__.py": "",
        "runner/__init__.py": "",
        "runner/run_task.py": "import os\nfrom hora.common.elastic import f\n",
        "runner/rounds.py": "",
        "common/config.py": "from hora.runner import rounds\n",
    })
    assert layer_violations(import_graph(root)) == [("hora.common.elastic", "hora.numpy", 2),
                                                    ("hora.runner.run_task", "hora.common.elastic", 2)]


@pytest.mark.parametrize("module", sorted(FORBIDDEN))
def test_every_layer_named_exists(module):
    assert module in module_files()
