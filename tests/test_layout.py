"""The house rules, checked from the source so they cannot silently regress (docs/ARCHITECTURE.md):
imports run one way between layers, no circles, no module over the size limit, and the
SpecDecoder is built in one place."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "specviz"

# Layers from the bottom up. A module may import its own layer's modules and any lower layer's,
# never a higher one's. analysis, prompts and telemetry sit beside each other on the ground floor
# and do not import each other.
LAYERS = [
    {"specviz.common", "specviz.childproc", "specviz.records"},
    {"specviz.analysis", "specviz.prompts", "specviz.telemetry", "specviz.wholefolder", "specviz.bounds"},
    {"specviz.runconfig"},  # a run's settings, checked against specviz.bounds; no torch
    {"specviz.models"},
    {"specviz.engine"},  # with kernels/, loaded as specviz.engine.kernels.*: the engine's hot step
    {"specviz.run"},
    {"specviz.measure"},
    {"specviz.peers"},  # talking to other servers (vLLM): process control, /metrics parsing
    {"specviz.distill"},
    {"specviz.checks", "specviz.interrupts"},  # the CLI's input checks and signal handling, under it
    # what the pages draw (pure figures and text) and the one device process with its client: side by side,
    # neither imports the other; the Streamlit code above them uses both
    {"specviz.figures", "specviz.device"},
    {"specviz.app", "specviz.cli"},
    {"specviz.__main__"},
]
MAX_LINES = 400


def component(module: str) -> str | None:
    for layer in LAYERS:
        for c in layer:
            if module == c or module.startswith(c + "."):
                return c
    return None


def rank(c: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if c in layer)


def modules():
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        name = ".".join(rel.parts).removesuffix(".__init__")
        yield name, path


def imports_of(path: Path) -> list[tuple[str, int]]:
    """Every specviz/kernels module this file imports, at any depth (lazy imports count too)."""
    out = []
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}:{node.lineno}: relative import (write specviz.x.y in full)"
            base = node.module or ""
            out.append((base, node.lineno))
            out += [(f"{base}.{a.name}", node.lineno) for a in node.names]  # `from specviz.app import charts`
    # a lazy import by name (importlib.import_module("specviz.engine.kernels.spec_verify")) is an import too
    out += [(node.args[0].value, node.lineno) for node in ast.walk(tree)
            if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
            and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)]
    return [(m, n) for m, n in out if m.split(".")[0] in ("specviz", "kernels")]


def resolve(name: str, known: set[str]) -> str | None:
    """The module an imported name refers to (``specviz.a.b.func`` -> ``specviz.a.b``)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def graph() -> dict[str, set[str]]:
    mods = dict(modules())
    # kernels/*.py are specviz.engine.kernels' package path (they import as specviz.engine.kernels.NAME)
    mods.update({f"specviz.engine.kernels.{p.stem}": p for p in sorted((ROOT / "kernels").glob("*.py"))})
    known = set(mods)
    g = {}
    for name, path in mods.items():
        g[name] = {r for m, _ in imports_of(path) if (r := resolve(m, known)) and r != name and r not in ("specviz",)}
    return g


def test_every_module_belongs_to_a_layer():
    assert [name for name, _ in modules() if name != "specviz" and component(name) is None] == []


def test_imports_never_run_up_a_layer_or_sideways_between_ground_floor_parts():
    bad = []
    for name, deps in graph().items():
        c = component(name)
        if c is None:
            continue
        for d in deps:
            cd = component(d)
            if cd is None or cd == c:
                continue
            if rank(cd) >= rank(c):
                bad.append(f"{name} imports {d}")
    assert bad == []


def test_measure_never_imports_distill_and_the_engine_never_imports_streamlit():
    for name, path in modules():
        text = path.read_text()
        if name.startswith(("specviz.engine", "specviz.models", "specviz.analysis", "specviz.run", "specviz.measure")):
            assert "import streamlit" not in text, name


def test_only_the_app_package_is_streamlit_code_figures_and_the_device_process_are_not():
    streamlit = {name for name, path in modules() if "import streamlit" in path.read_text()}
    assert streamlit and all(name.startswith("specviz.app.") for name in streamlit), sorted(streamlit)


def test_there_is_no_import_circle():
    g = graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for d in g.get(n, ()):
            if state.get(d) == 1:
                raise AssertionError("import circle: " + " -> ".join(stack[stack.index(d):] + [d]))
            if d not in state:
                visit(d)
        stack.pop()
        state[n] = 2

    for n in g:
        if n not in state:
            visit(n)


def test_no_module_page_or_kernel_is_over_the_size_limit():
    """About MAX_LINES lines is where a module usually holds more than one concept: the signal to
    find the cut, for the package, the pages, the kernels and app.py alike."""
    files = [p for _, p in modules()] + sorted((ROOT / "pages").glob("*.py")) + sorted((ROOT / "kernels").glob("*.py"))
    long = {str(p.relative_to(ROOT)): n for p in files + [ROOT / "app.py"] if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_the_decoder_is_built_only_in_run():
    builders = []
    for name, path in modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "SpecDecoder":
                builders.append(name)
    assert set(builders) <= {"specviz.run"}, builders


def test_nothing_imports_the_kernels_folder_as_a_top_level_package():
    """`kernels` is the Hugging Face package transformers imports; the repo's kernels/ folder is
    reached only as specviz.engine.kernels, and has no __init__.py that could shadow it."""
    assert not (ROOT / "kernels" / "__init__.py").exists()
    files = [*PKG.rglob("*.py"), *(ROOT / "kernels").glob("*.py"), *(ROOT / "tests").rglob("*.py"),
             *(ROOT / "bench").glob("*.py"), *(ROOT / "pages").glob("*.py"), ROOT / "app.py"]
    bad = [f"{p.relative_to(ROOT)}:{n}" for p in files for m, n in imports_of(p) if m.split(".")[0] == "kernels"]
    assert bad == []


# Test folders that stand for something other than a specviz subpackage: the real server in a real
# browser (e2e) and the scripts in bench/.
TEST_FOLDERS_BEYOND_THE_PACKAGE = {"e2e", "bench"}


def test_tests_live_in_folders_that_mirror_the_package():
    """tests/engine tests specviz/engine, tests/app specviz/app, and so on; tests of specviz's
    top-level modules sit in tests/ itself, beside the shared fakes that conftest.py puts on the path."""
    packages = {p.name for p in PKG.iterdir() if (p / "__init__.py").exists()}
    folders = {p.parent.relative_to(ROOT / "tests").as_posix() for p in (ROOT / "tests").rglob("test_*.py")}
    assert folders - {"."} <= packages | TEST_FOLDERS_BEYOND_THE_PACKAGE, folders
    assert "." in folders
    names = [p.name for p in (ROOT / "tests").rglob("test_*.py")]
    assert len(names) == len(set(names)), "two test files share a name; pytest imports them by basename"
