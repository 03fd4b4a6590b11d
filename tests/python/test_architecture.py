"""The layers of src/ as CMakeLists.txt declares them (hora_layer), as
docs/architecture.md draws them, and as the code's #includes use them: the
three agree, and no file includes a layer above its own. The build enforces
the same rule (each layer compiles against an include root holding only the
layers it may use); this test says it without a compile, and names the file."""

import os
import re

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SRC = os.path.join(REPO, "src")
INCLUDE = os.path.join(REPO, "include")
MAX_LINES = 600  # STYLE.md: files stay under ~600 lines

LAYER_CALL = re.compile(r"^\s*hora_layer\(([^)]*)\)", re.MULTILINE)
QUOTED_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def cmake_layers(text):
    """{layer: (folder, [direct dependencies])} from the hora_layer() calls."""
    layers = {}
    for call in LAYER_CALL.finditer(text):
        words = call.group(1).split()
        name, args = words[0], words[1:]
        folder, depends, key = None, [], None
        for word in args:
            if word in ("DIR", "DEPENDS", "TARGET"):
                key = word
            elif word == "MODULE":
                key = None
            elif key == "DIR":
                folder = word
            elif key == "DEPENDS":
                depends.append(word)
        assert folder, f"hora_layer({name}) names no DIR"
        assert name not in layers, f"layer {name} is declared twice"
        layers[name] = (folder, depends)
    return layers


def doc_layers(text):
    """The same, from the table between the layers markers of the doc."""
    match = re.search(r"<!-- layers: begin -->(.*?)<!-- layers: end -->", text, re.DOTALL)
    assert match, "docs/architecture.md has no layer table"
    layers = {}
    for line in match.group(1).strip().splitlines()[2:]:
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        name, folder, uses = cells[0], cells[1].strip("`"), cells[2]
        assert folder.startswith("src/") and folder.endswith("/"), line
        layers[name] = (folder[len("src/"):-1], [u.strip() for u in uses.split(",") if u.strip()])
    return layers


def visible(layers, name):
    """A layer and every layer below it."""
    seen, pending = [], [name]
    while pending:
        layer = pending.pop()
        if layer not in seen:
            seen.append(layer)
            pending.extend(layers[layer][1])
    return seen


def include_violations(layers, files):
    """Messages for each #include that leaves the layers its file may use.

    `files` maps a path under src/ ("net/socket.cc") to its text."""
    by_folder = {folder: name for name, (folder, _) in layers.items()}
    problems = []
    for path, text in sorted(files.items()):
        folder = os.path.dirname(path)
        if folder not in by_folder:
            problems.append(f"src/{path}: its folder src/{folder}/ is no layer")
            continue
        layer = by_folder[folder]
        allowed = {layers[name][0] for name in visible(layers, layer)}
        for included in QUOTED_INCLUDE.findall(text):
            if included.startswith("hora/"):
                continue
            target = os.path.dirname(included)
            if ".." in included.split("/") or not target:
                problems.append(f"src/{path}: includes \"{included}\": name it from src/ (\"<folder>/<file>\")")
            elif target not in by_folder:
                problems.append(f"src/{path}: includes \"{included}\", which is in no layer")
            elif target not in allowed:
                problems.append(f"src/{path} (layer {layer}) includes \"{included}\" of layer {by_folder[target]}, "
                                f"which it may not use")
    return problems


def source_files():
    files = {}
    for root, _, names in os.walk(SRC):
        for name in names:
            if name.endswith((".h", ".cc")):
                path = os.path.join(root, name)
                files[os.path.relpath(path, SRC)] = read(path)
    return files


@pytest.fixture(scope="module")
def layers():
    return cmake_layers(read(os.path.join(REPO, "CMakeLists.txt")))


def test_the_doc_draws_the_layers_the_build_declares(layers):
    doc = read(os.path.join(REPO, "docs", "architecture.md"))
    documented = doc_layers(doc)
    assert documented == layers
    diagram = re.search(r"## Layers.*?```\n(.*?)```", doc, re.DOTALL).group(1)
    for name in layers:
        assert re.search(rf"\b{name}\b", diagram), f"the diagram of docs/architecture.md lacks {name}"


def test_layers_form_a_hierarchy_declared_bottom_up(layers):
    order = list(layers)
    for name, (_, depends) in layers.items():
        for below in depends:
            assert below in layers, f"{name} depends on undeclared layer {below}"
            assert order.index(below) < order.index(name), f"{name} is declared before {below}, which it uses"


def test_every_source_folder_is_a_layer(layers):
    folders = {os.path.dirname(path) for path in source_files()}
    assert folders == {folder for folder, _ in layers.values()}


def test_no_include_points_upward(layers):
    assert include_violations(layers, source_files()) == []


def test_the_include_check_catches_an_upward_include(layers):
    upward = {
        "net/socket.cc": '#include "net/socket.h"\n#include "coordinator/wire.h"\n',
        "transport/shm/ring.cc": '#include "transport/hierarchical/hierarchical_backend.h"\n',
        "control/x.cc": '#include "control/control_plane.h"\n#include "transport/shm/ring.h"\n',
        "util/log.cc": '#include "../net/socket.h"\n',
        "store/x.cc": '#include "x.h"\n',
    }
    problems = include_violations(layers, upward)
    assert len(problems) == 4, problems
    assert any("src/net/socket.cc (layer net) includes \"coordinator/wire.h\"" in p for p in problems)
    assert any("transport/hierarchical" in p for p in problems)
    assert any("../net/socket.h" in p for p in problems)
    assert any('"x.h"' in p for p in problems)


def test_no_source_file_is_over_the_limit():
    long_files = {path: text.count("\n") for path, text in source_files().items() if text.count("\n") > MAX_LINES}
    assert long_files == {}


def test_public_headers_include_only_public_headers():
    for root, _, names in os.walk(INCLUDE):
        for name in names:
            for included in QUOTED_INCLUDE.findall(read(os.path.join(root, name))):
                assert included.startswith("hora/"), f"{name} includes {included}"
