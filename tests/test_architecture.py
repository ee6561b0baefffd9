"""The house rules of docs/ARCHITECTURE.md that a reader of the source can check.

* No import circles between the package's modules, counting the imports made inside
  functions (a lazy import that closes a circle is still a circle) and the packages an
  import runs first (``import a.b.c`` runs ``a/b/__init__.py``); imports made only for
  type checkers (``if TYPE_CHECKING:``) do not run and do not count.
* A backend (TensorFlow, JAX, torch) is imported only where traces are made:
  ``capture/forward.py``, ``capture/data.py`` for a ``tf.data.Dataset`` it was given, and
  ``capture/torchdata.py`` (the one ``import torch`` of native PyTorch support, used by
  ``capture/torch.py``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "pytest_sadl"
BACKENDS = ("tensorflow", "jax", "torch")
BACKEND_MODULES = {
    "pytest_sadl.capture.forward",
    "pytest_sadl.capture.data",
    "pytest_sadl.capture.torch",  # native PyTorch models (it imports torch through torchdata)
    "pytest_sadl.capture.torchdata",
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node except those under ``if TYPE_CHECKING:``."""
    out: list[ast.AST] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        out.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> tuple[set[str], set[str]]:
    """(the package's modules ``name`` imports, the top-level packages it imports)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    inside, outside = set(), set()
    for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            outside.add(module.partition(".")[0])
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                inside.add(sub if sub in modules else module)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                outside.add(alias.name.partition(".")[0])
                inside.add(alias.name)
    # Importing a.b.c runs the packages a and a.b first: an edge to each package the
    # importer is not itself inside (a package's own modules import it while it loads).
    parents = set()
    for module in inside:
        parts = module.split(".")
        for k in range(2, len(parts)):
            parent = ".".join(parts[:k])
            if parent in modules and not name.startswith(parent + "."):
                parents.add(parent)
    inside = {m for m in inside | parents if m in modules and m != name}
    return inside, outside


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    state: dict[str, int] = {}
    found: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                found.append(path[path.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt, path)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    return found


def test_the_cycle_finder_finds_a_circle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c", "a"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_a_circle_through_a_package_init_is_found(tmp_path: Path) -> None:
    """x imports pkg.sub, which runs pkg/__init__.py, which imports y, which imports x."""
    files = {
        "x.py": "from pytest_sadl.pkg.sub import f\n",
        "y.py": "import pytest_sadl.x\n",
        "pkg/__init__.py": "from pytest_sadl.pkg.sub import f\nfrom pytest_sadl import y\n",
        "pkg/sub.py": "def f(): pass\n",
    }
    modules = {}
    for rel, text in files.items():
        path = tmp_path / "pytest_sadl" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        name = "pytest_sadl." + rel[:-3].replace("/", ".").removesuffix(".__init__")
        modules[name] = path
    graph = {name: _imports(name, path, modules)[0] for name, path in modules.items()}
    assert graph["pytest_sadl.x"] == {"pytest_sadl.pkg", "pytest_sadl.pkg.sub"}
    assert graph["pytest_sadl.pkg.sub"] == set(), "a package's own module does not depend on its __init__"
    assert ["pytest_sadl.pkg", "pytest_sadl.y", "pytest_sadl.x", "pytest_sadl.pkg"] in _cycles(graph)


def test_no_import_circles() -> None:
    modules = _modules()
    graph = {name: _imports(name, path, modules)[0] for name, path in modules.items()}
    assert "pytest_sadl.profile.lookup" in graph  # the walk sees subpackages
    assert {"pytest_sadl.profile.build", "pytest_sadl.profile.files"} <= graph["pytest_sadl.profile.lookup"]
    assert _cycles(graph) == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_backends_are_imported_only_where_traces_are_made(backend: str) -> None:
    modules = _modules()
    users = {name for name, path in modules.items() if backend in _imports(name, path, modules)[1]}
    assert users <= BACKEND_MODULES, f"{backend} imported in {sorted(users - BACKEND_MODULES)}"
    assert "pytest_sadl.capture.forward" in users


# The rooms of docs/ARCHITECTURE.md: what may live at the top level, and where each kind of
# thing lives. A new module goes into a room (and into the map), not beside them.
TOP_LEVEL = {
    "__init__",
    "__main__",
    "atomic",
    "codec",
    "config",
    "covered",
    "errors",
    "fingerprint",
    "records",
    "results",
    "resultsfile",
    "specs",
    "text",
}
ROOMS = {"capture", "cli", "criteria", "engine", "plugin", "profile", "report", "store"}
MAP = Path(__file__).resolve().parents[1] / "docs" / "ARCHITECTURE.md"
INTERNAL_EXCEPTIONS = {
    "pytest_sadl.store.entry.Invalid",
    "pytest_sadl.store.locks.LockTimeout",
    "pytest_sadl.criteria.neurons.NonFiniteTraces",  # a ValueError the build makes a SadlModelError line
}


def test_the_package_is_its_rooms() -> None:
    top = {p.stem for p in PACKAGE.glob("*.py")}
    rooms = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert top == TOP_LEVEL, f"top-level modules outside a room: {sorted(top - TOP_LEVEL)}"
    assert rooms == ROOMS, f"rooms not in the map: {sorted(rooms ^ ROOMS)}"


def test_every_module_is_on_the_map() -> None:
    """Each module has its row in docs/ARCHITECTURE.md (package __init__s of the rooms aside)."""
    text = MAP.read_text(encoding="utf-8")
    missing = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if path.name != "__init__.py" or path.parent.name == "capture"
        if f"`{path.relative_to(PACKAGE).as_posix()}`" not in text and path.parent.name != "report"
    ]
    assert not missing, f"modules missing from docs/ARCHITECTURE.md: {missing}"


def test_exceptions_and_warnings_users_meet_live_in_errors() -> None:
    found = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and any(
                ast.unparse(b).endswith(("Error", "Warning", "Exception", "Interrupt")) for b in node.bases
            ):
                found.append(f"{name}.{node.name}")
    outside = [f for f in found if not f.startswith("pytest_sadl.errors.") and f not in INTERNAL_EXCEPTIONS]
    assert not outside, f"exceptions outside errors.py: {outside}"
    assert "pytest_sadl.errors.SadlWarning" in found


def test_package_inits_hold_no_aliases() -> None:
    """A room's __init__ is a docstring (capture's and the engine's name their public API);
    nothing re-exports another module's names under a second path (the old ``traces.py`` alias)."""
    for init in PACKAGE.glob("*/__init__.py"):
        if init.parent.name in ("capture", "engine"):
            continue
        body = ast.parse(init.read_text(encoding="utf-8")).body
        assert all(isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) for n in body), init
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                assert not any(a.name == "*" for a in node.names), f"import * in {path}"


DASK_MODULES = {"pytest_sadl.profile.distributed"}


def test_dask_is_imported_only_by_the_cluster_modules() -> None:
    """Dask (``dask``, ``distributed``) only in profile/distributed.py (profile/cluster.py
    uses the client it makes); the criteria's per-shard halves (criteria/sharded.py) are
    pure NumPy."""
    modules = _modules()
    users = {name for name, path in modules.items() if {"dask", "distributed"} & _imports(name, path, modules)[1]}
    assert users == DASK_MODULES, f"Dask imported in {sorted(users ^ DASK_MODULES)}"
    assert (
        "pytest_sadl.profile.cluster"
        not in _imports("pytest_sadl.criteria.sharded", modules["pytest_sadl.criteria.sharded"], modules)[0]
    )


# Which rooms (and top-level modules) each may import, lazy imports included: the layers of
# docs/ARCHITECTURE.md, shared types below their users. The package's own __init__ (its
# version) is open to all. A new edge is a decision: make it here and in the map.
MAY_IMPORT = {
    "errors": set(),
    "text": set(),
    "atomic": set(),
    "fingerprint": set(),
    "specs": {"errors", "text"},
    "codec": set(),
    "results": {"atomic", "codec"},
    "covered": {"results"},
    "criteria": {"codec", "errors", "results"},
    "config": {"criteria"},
    "resultsfile": {"criteria", "errors", "results", "text"},  # criteria: the registry's names
    "capture": {"criteria", "errors", "fingerprint", "specs", "text"},
    "records": {"capture"},  # capture.data's text helpers (NumPy), lazily
    "store": {"atomic", "errors"},
    "profile": {"capture", "criteria", "errors", "fingerprint", "store", "text"},
    "engine": {"config", "covered", "criteria", "errors", "records", "results"},
    "report": {"atomic", "config", "criteria", "results", "text"},
    "plugin": {"atomic", "capture", "config", "covered", "criteria", "engine", "errors", "profile", "records", "report"}
    | {"results", "resultsfile", "specs", "store", "text"},
    "cli": {"atomic", "capture", "config", "covered", "criteria", "engine", "errors", "plugin", "profile", "records"}
    | {"report", "results"}
    | {"resultsfile", "store", "text"},
    "__main__": {"cli"},
    "__init__": set(),
}


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _edges() -> dict[tuple[str, str], list[str]]:
    modules = _modules()
    out: dict[tuple[str, str], list[str]] = {}
    for name, path in modules.items():
        for dep in _imports(name, path, modules)[0]:
            a, b = _unit(name), _unit(dep)
            if a != b and b != "__init__":
                out.setdefault((a, b), []).append(f"{name} -> {dep}")
    return out


def test_imports_go_only_where_the_map_allows() -> None:
    """Every import between rooms, lazy ones included, is one MAY_IMPORT allows: the engine
    and the reports never reach up into the plugin, capture never into profile."""
    units = {_unit(m) for m in _modules()}
    assert units == set(MAY_IMPORT), f"rooms without a rule: {sorted(units ^ set(MAY_IMPORT))}"
    wrong = [w for (a, b), where in sorted(_edges().items()) if b not in MAY_IMPORT[a] for w in where]
    assert not wrong, "imports against docs/ARCHITECTURE.md's layers:\n" + "\n".join(wrong)


# Modules with a narrower rule than their room's: the recorder is the per-test ledger only,
# the backend's call interception lives in capture/ (keras_calls, torch_calls).
MODULE_MAY_IMPORT = {
    "pytest_sadl.plugin.recorder": {
        "pytest_sadl.errors",
        "pytest_sadl.records",
        "pytest_sadl.capture",  # the package, which importing its modules runs
        "pytest_sadl.capture.keras_calls",
        "pytest_sadl.capture.torch_calls",
    },
}


@pytest.mark.parametrize("name", sorted(MODULE_MAY_IMPORT))
def test_narrow_modules_import_only_their_own(name: str) -> None:
    """The recorder imports the records, the errors and (lazily) the two call modules; no
    backend, no Keras, nothing else of capture."""
    modules = _modules()
    inside, outside = _imports(name, modules[name], modules)
    assert inside <= MODULE_MAY_IMPORT[name], f"{name} imports {sorted(inside - MODULE_MAY_IMPORT[name])}"
    assert not outside & {"keras", *BACKENDS}, f"{name} imports {sorted(outside & {'keras', *BACKENDS})}"


def test_the_direction_check_sees_a_lazy_import_upwards(tmp_path: Path) -> None:
    """A function-level import from the engine into the plugin is an edge the check refuses."""
    path = tmp_path / "engine.py"
    path.write_text("def f():\n    from pytest_sadl.plugin.options import read_options\n")
    modules = {"pytest_sadl.engine": path, "pytest_sadl.plugin.options": path}
    deps = _imports("pytest_sadl.engine", path, modules)[0]
    assert {_unit(d) for d in deps} == {"plugin"} and "plugin" not in MAY_IMPORT["engine"]
