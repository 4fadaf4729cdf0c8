"""The layering of ../shared/STYLE.md and DESIGN.md, checked by parsing every module with ``ast``.

- Imports point down the layers (``LAYER``, ``ALLOWED``), dynamic imports of a constant name included.
- The numeric core (metrics, stats, calibration) loads no heavy library and does no file or process I/O.
- ``results`` (the typed documents) imports no stage and is imported only by the stages that hand them on.
- Every dynamic import or code execution (``importlib.import_module``, ``__import__``, ``exec``, ``eval``,
  a loader's ``exec_module``, ...) in ``src/sitecal`` is in ``DYNAMIC_IMPORTS``, with its reason.

Each checker is a function of source text, and each rule has a test on a small synthetic source showing
that it reports what it forbids.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "sitecal"

LAYER = {
    "errors": 1,
    "_validation": 1,
    "_types": 1,
    "_split_key": 1,
    "results": 1,
    "provenance": 1,
    "_pseudonym": 1,
    "_hash_manifest": 1,  # remembered file hashes (hash once), keyed under the site key
    "_hash_store": 1,  # the file-hash manifest's SQLite file: masked, checked rows
    "_io": 1,
    "_seal": 1,  # the run folder's seal: file hashes under an HMAC of the site key
    "_kernels": 1,  # compiled per-resample loops (numba), loaded on first use
    "_dicomfile": 1,
    "_scrub": 1,
    "_text": 1,  # the words that follow a count in messages
    "_progress": 1,  # the console's progress bars
    "_worker_logs": 1,
    "__init__": 1,
    "metrics": 2,
    "stats": 2,
    "calibration": 2,
    "protocol": 3,
    "cohort": 3,
    "inference": 3,
    "pacs": 3,
    "evaluation": 4,
    "report": 4,
    "monitor": 4,  # after go-live: windows, sequential alarms, the history database
    # the stages and their composition into a run, and what works on a run folder (plan, apply, export)
    "run": 5,
    "arrays": 5,
    "demo": 5,
    "cli": 6,
}
NUMERIC_CORE = ("metrics", "stats", "calibration")
NUMERIC_FORBIDDEN = {"torch", "pydicom", "monai", "reportlab", "yaml", "pydantic", "matplotlib", "tqdm"}
# Libraries a part never imports (the numeric core: DESIGN.md's dependency rule; results: documents stay
# light to read and write).
FORBIDDEN_LIBRARIES = {
    **{part: NUMERIC_FORBIDDEN for part in NUMERIC_CORE},
    "results": {"torch", "monai", "pydicom", "reportlab", "matplotlib"},
}
# The numeric core takes arrays and returns result objects: no file, network or process I/O.
NUMERIC_IO_MODULES = {
    "json",
    "pathlib",
    "os",
    "io",
    "pickle",
    "shutil",
    "tempfile",
    "csv",
    "glob",
    "gzip",
    "zipfile",
    "sqlite3",
    "socket",
    "subprocess",
    "urllib",
}
# ... except that it may ask os how many CPUs this process may use (stats._spec.available_cores)
NUMERIC_OS_NAMES = {"cpu_count", "sched_getaffinity"}
NUMERIC_IO_CALLS = {
    "builtins.open",
    "numpy.load",
    "numpy.save",
    "numpy.savez",
    "numpy.savez_compressed",
    "numpy.loadtxt",
    "numpy.savetxt",
    "numpy.genfromtxt",
    "numpy.fromfile",
    "numpy.memmap",
}
NUMERIC_IO_METHODS = {"tofile"}  # ndarray.tofile, whatever the array is called
# Which sitecal parts each part may import, beyond the base layer (layer 1).
ALLOWED = {
    "metrics": set(),
    "stats": {"metrics", "calibration"},  # the refit bootstrap resamples the whole temperature fit
    "calibration": {"metrics"},
    "results": {"metrics", "stats", "calibration"},  # typed documents may hold the core's result objects
    "protocol": set(),
    # the predictions file turns probabilities into scores with the core's log_probabilities
    "cohort": {"protocol", "metrics"},
    "inference": {"protocol", "calibration"},  # the deployable wrapper applies fitted temperatures
    "pacs": {"protocol"},  # retrieves what data.source asks for
    # an application on the core, like run: it may import the core; only cli imports it
    "demo": {"metrics", "stats", "calibration", "protocol", "cohort", "inference"},
    "evaluation": {"protocol", "metrics", "stats", "calibration"},
    "report": set(),
    # after go-live: the windows' results with the core's bootstrap and sequential tests, judged on the
    # validation's criteria (results), kept in a history database
    "monitor": {"metrics", "stats", "calibration", "results"},
    # the notebook route: the evaluation stage on arrays, and the report stage's rendering (run.stages)
    "arrays": {"protocol", "cohort", "evaluation", "metrics", "stats", "calibration", "run"},
    # `import sitecal` re-exports evaluate_arrays on first use (module __getattr__), loading nothing before
    "__init__": {"arrays"},
    # the run layer (one package; its modules import each other directly):
    # - the stages (run.stages), each runnable alone: the scan (cohort; pacs for a PACS source), the
    #   predict stage (the model run on the cohort's studies, here or shard by shard on Dask workers:
    #   inference), the evaluation and the report drawn from a run folder's stored results (evaluation,
    #   report), the verdict judged again from its criteria;
    # - the run (run._protocol_run) composes them, writes the run folder's tables (the cohort's exclusions)
    #   and provenance (the sha256s of what it read, seeds, device, how its logits were made), and sends
    #   report.dcm to the archive of report.send_to (pacs);
    # - the preflight: labels, mappings, the model and the PACS, before the scan;
    # - a run folder opened as evidence (run.sealed): its key found from the run's protocol (as
    #   `sitecal send` finds it);
    # - planning: simulates criteria with the evaluation's own rule and the statistics engine, from a run
    #   folder's calibration settings, logits and split (--from-run);
    # - apply: a run's calibration applied to scores made elsewhere (the scores file is read as predictions
    #   are: cohort, calibration, metrics);
    # - export: a run's model and temperatures exported for deployment, checked on the run's evaluation
    #   studies found again by the run's own scan, read through its transforms and calibrated by its fits
    "run": {
        "pacs",
        "protocol",
        "cohort",
        "inference",
        "evaluation",
        "report",
        "metrics",
        "stats",
        "calibration",
        "results",
        "monitor",  # sitecal monitor: the baseline opened as evidence, the monitoring folder sealed
    },
    "cli": {"run", "protocol", "cohort", "inference", "demo"},
}


# Single modules a part may import although their part is not in its ALLOWED set.
ALLOWED_MODULES = {
    # the metric registry: the protocol validates metric names with it, the report prints their labels
    "protocol": {"sitecal.metrics.registry"},
    "report": {"sitecal.metrics.registry"},
}
# Parts only the listed parts may import, whatever the layers say (applies once the part exists).
IMPORTED_ONLY_BY = {
    # the typed documents are handed on by the stages that make and read them
    "results": {"evaluation", "report", "run", "arrays", "cli", "monitor"},
}

# Calls that import or run code chosen at run time. Every one in src/sitecal is listed in DYNAMIC_IMPORTS.
DYNAMIC_IMPORT_CALLS = {
    "builtins.__import__",
    "builtins.compile",
    "builtins.eval",
    "builtins.exec",
    "importlib.__import__",
    "importlib.import_module",
    "importlib.reload",
    "importlib.machinery.SourceFileLoader",
    "importlib.util.module_from_spec",
    "importlib.util.spec_from_file_location",
    "importlib.util.spec_from_loader",
    "runpy.run_module",
    "runpy.run_path",
}
DYNAMIC_IMPORT_METHODS = {"exec_module", "load_module"}  # a loader running a module, whatever holds it
# Those whose first argument names a module: a constant name counts as an import for the layering.
_IMPORTS_BY_NAME = {
    "builtins.__import__",
    "importlib.__import__",
    "importlib.import_module",
    "runpy.run_module",
}
_BUILTINS = {"__import__", "compile", "eval", "exec", "open"}
# (file under src/sitecal, call) -> why it is needed. Anything else is refused.
DYNAMIC_IMPORTS = {
    ("inference/models.py", "importlib.import_module"): (
        "a weights-only model's architecture is the class the protocol names ('package.module:Class'); "
        "the standard library and __main__ are refused before the import"
    ),
}


def _part(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0].removesuffix(".py")


def _aliases(tree: ast.AST) -> dict[str, str]:
    """Each name the module's imports bind -> the dotted name it stands for."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    out[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    out[top] = top
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                out[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return out


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return None if inner is None else f"{inner}.{node.attr}"
    return None


def _calls(tree: ast.AST) -> list[tuple[ast.Call, str | None]]:
    """Every call with the dotted name of what it calls, imports resolved (``np.save`` -> ``numpy.save``),
    a builtin as ``builtins.<name>``; None for a call of an expression (``f()()``, ``x[0]()``)."""
    aliases = _aliases(tree)
    out: list[tuple[ast.Call, str | None]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        dotted = _dotted(node.func)
        if dotted is not None:
            head, _, rest = dotted.partition(".")
            if head in aliases:
                dotted = aliases[head] + (f".{rest}" if rest else "")
            elif not rest and head in _BUILTINS:
                dotted = f"builtins.{head}"
        out.append((node, dotted))
    return out


def dynamic_imports(source: str) -> list[tuple[int, str, str | None]]:
    """(line, call, module name if a constant) of each dynamic import or code execution in ``source``."""
    found: list[tuple[int, str, str | None]] = []
    for call, name in _calls(ast.parse(source)):
        method = call.func.attr if isinstance(call.func, ast.Attribute) else None
        if name in DYNAMIC_IMPORT_CALLS:
            first = (
                call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "name"), None)
            )
            target = None
            if name in _IMPORTS_BY_NAME and isinstance(first, ast.Constant) and isinstance(first.value, str):
                target = first.value
            found.append((call.lineno, name, target))
        elif method in DYNAMIC_IMPORT_METHODS:
            found.append((call.lineno, f"<loader>.{method}", None))
    return sorted(found, key=lambda f: f[0])


def imports_of(source: str, package: list[str]) -> set[str]:
    """Absolute names of every module ``source`` imports (relative imports resolved against ``package``,
    e.g. ``["sitecal", "report"]``), with the constant names of its dynamic imports."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            names.add(module)
            if module == "sitecal":
                names.update(f"sitecal.{alias.name}" for alias in node.names)
    names.update(target for _, _, target in dynamic_imports(source) if target and not target.startswith("."))
    return names


def _imports(path: Path) -> set[str]:
    return imports_of(path.read_text(encoding="utf-8"), ["sitecal", *path.relative_to(SRC).parent.parts])


def layer_problems(part: str, names: set[str]) -> list[str]:
    """What part ``part`` (``"report"``, ``"run"``, ...) must not import among the modules ``names``."""
    problems = []
    for name in sorted(names):
        top = name.split(".")[0]
        if top in FORBIDDEN_LIBRARIES.get(part, set()):
            problems.append(f"imports {name}: {part} never loads {top}")
        if top != "sitecal" or name == "sitecal":
            continue
        target = name.split(".")[1]
        if target == "__version__" or target == part:
            continue
        if target not in LAYER:
            problems.append(f"imports unknown sitecal part {name}")
            continue
        if target in IMPORTED_ONLY_BY and part not in IMPORTED_ONLY_BY[target]:
            problems.append(f"imports {name}: only {sorted(IMPORTED_ONLY_BY[target])} import {target}")
            continue
        if LAYER[target] == 1 or target in ALLOWED.get(part, set()):
            continue
        if any(name == m or name.startswith(f"{m}.") for m in ALLOWED_MODULES.get(part, set())):
            continue
        problems.append(f"({part}) must not import {name}")
    return problems


def numeric_io_problems(source: str) -> list[str]:
    """The file, network and process I/O in ``source`` that the numeric core must not do."""
    tree = ast.parse(source)
    problems = []
    for node in ast.walk(tree):
        modules: list[tuple[str, str | None]] = []  # (module, the name taken from it)
        if isinstance(node, ast.Import):
            modules = [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            modules = [(node.module, alias.name) for alias in node.names]
        for module, taken in modules:
            top = module.split(".")[0]
            if top not in NUMERIC_IO_MODULES:
                continue
            if top == "os" and module == "os" and (taken is None or taken in NUMERIC_OS_NAMES):
                continue  # `import os` is checked by its uses below
            problems.append(f"line {node.lineno}: imports {module}" + (f".{taken}" if taken else ""))
    aliases = _aliases(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if aliases.get(node.value.id) == "os" and node.attr not in NUMERIC_OS_NAMES:
                problems.append(f"line {node.lineno}: uses os.{node.attr} (only {sorted(NUMERIC_OS_NAMES)})")
    for call, name in _calls(tree):
        method = call.func.attr if isinstance(call.func, ast.Attribute) else None
        if name in NUMERIC_IO_CALLS:
            problems.append(f"line {call.lineno}: calls {name}")
        elif method in NUMERIC_IO_METHODS:
            problems.append(f"line {call.lineno}: calls .{method}")
    return problems


def private_import_problems(part: str, names: set[str]) -> list[str]:
    """Imports by part ``part`` of another package's private module (``sitecal.<pkg>._<module>``).

    A package is used through its front door, its ``__init__``: what one package needs of another is
    exported there, so a package can rearrange its private modules without breaking the others.
    """
    problems = []
    for name in sorted(names):
        parts = name.split(".")
        if len(parts) >= 3 and parts[0] == "sitecal" and parts[1] != part and parts[2].startswith("_"):
            problems.append(f"imports {name}: use what sitecal.{parts[1]} exports from its __init__")
    return problems


def _module_imports(source: str, module: str, is_package: bool, known: set[str]) -> set[str]:
    """The sitecal modules ``module`` imports, lazy and ``TYPE_CHECKING`` imports included.

    A circle of types is a circle a reader walks, so type-only imports count. ``from package import
    name`` stands for the submodule ``package.name`` where there is one.
    """
    package = module if is_package else module.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")
            base = parts[: len(parts) - node.level + 1] if node.level else []
            target = ".".join([*base, *([node.module] if node.module else [])])
            subs = {f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in known}
            out.update(subs if len(subs) == len(node.names) else {target, *subs})
    return (out & known) - {module}


def import_circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected sets of more than one module in ``graph`` (module -> what it imports)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[frozenset[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):  # a loop over what v imports
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = stack[stack.index(v) :]
            del stack[stack.index(v) :]
            if len(part) > 1:
                circles.append(frozenset(part))

    for v in sorted(graph):  # a loop over the modules
        if v not in index:
            visit(v)
    return circles


def _sitecal_graph() -> dict[str, set[str]]:
    names = {
        ".".join(("sitecal", *p.relative_to(SRC).with_suffix("").parts)).removesuffix(".__init__"): p
        for p in SRC.rglob("*.py")
    }
    known = set(names)
    return {
        # the package root's imports are the lazy attributes of its public API (``sitecal.evaluate_arrays``):
        # they point up on purpose and are left out
        name: set()
        if name == "sitecal"
        else _module_imports(path.read_text(encoding="utf-8"), name, path.name == "__init__.py", known)
        for name, path in names.items()
    }


MODULES = sorted(SRC.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_imports_point_down(path: Path) -> None:
    part = _part(path)
    assert part in LAYER, f"{path}: assign '{part}' a layer in tests/test_architecture.py"
    problems = layer_problems(part, _imports(path))
    assert not problems, f"{path}: " + "; ".join(problems)


def test_no_import_circle() -> None:
    """No module reaches itself through its imports, lazy and type-only ones included."""
    circles = import_circles(_sitecal_graph())
    assert not circles, f"import circles: {[sorted(c) for c in circles]}"


def test_circles_are_found_lazy_and_type_only_imports_included() -> None:
    known = {"sitecal.a", "sitecal.b", "sitecal.c", "sitecal.d", "sitecal.pkg", "sitecal.pkg.x"}
    sources = {
        "sitecal.a": ("from sitecal.b import f\n", False),
        "sitecal.b": ("def g():\n    from sitecal.a import h\n", False),  # lazy: still a circle
        "sitecal.c": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from sitecal.d import T\n",
            False,
        ),
        "sitecal.d": ("from sitecal.c import k\n", False),  # with c's type-only import: a circle
        "sitecal.pkg": ("from sitecal.pkg import x\n", True),  # a package importing its submodule
        "sitecal.pkg.x": ("from sitecal.a import f\n", False),
    }
    graph = {m: _module_imports(text, m, pkg, known) for m, (text, pkg) in sources.items()}
    assert graph["sitecal.pkg"] == {"sitecal.pkg.x"}
    assert set(import_circles(graph)) == {
        frozenset({"sitecal.a", "sitecal.b"}),
        frozenset({"sitecal.c", "sitecal.d"}),
    }


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_packages_are_used_through_their_front_doors(path: Path) -> None:
    problems = private_import_problems(_part(path), _imports(path))
    assert not problems, f"{path}: " + "; ".join(problems)


def test_the_front_door_rule_reports_what_it_forbids() -> None:
    assert private_import_problems("report", {"sitecal.stats._scale", "sitecal.stats", "sitecal.errors"}) == [
        "imports sitecal.stats._scale: use what sitecal.stats exports from its __init__"
    ]
    assert private_import_problems("stats", {"sitecal.stats._scale", "sitecal._kernels"}) == []
    assert private_import_problems("cli", {"sitecal._kernels._draws"}) == [
        "imports sitecal._kernels._draws: use what sitecal._kernels exports from its __init__"
    ]
    source = "def f():\n    from sitecal.inference._sharded import Placement\n"
    assert private_import_problems("run", imports_of(source, ["sitecal"])) == [
        "imports sitecal.inference._sharded: use what sitecal.inference exports from its __init__"
    ]


@pytest.mark.parametrize(
    "path", [p for p in MODULES if _part(p) in NUMERIC_CORE], ids=lambda p: str(p.relative_to(SRC))
)
def test_the_numeric_core_does_no_io(path: Path) -> None:
    problems = numeric_io_problems(path.read_text(encoding="utf-8"))
    assert not problems, f"{path}: the numeric core takes arrays and returns results: " + "; ".join(problems)


def test_dynamic_imports_are_listed_with_their_reason() -> None:
    found = {
        (path.relative_to(SRC).as_posix(), call): line
        for path in MODULES
        for line, call, _ in dynamic_imports(path.read_text(encoding="utf-8"))
    }
    unlisted = [
        f"{where}:{line}: {call}"
        for (where, call), line in sorted(found.items())
        if (where, call) not in DYNAMIC_IMPORTS
    ]
    assert not unlisted, (
        "dynamic imports not in DYNAMIC_IMPORTS (remove them, or list them with the reason):\n"
        + "\n".join(unlisted)
    )
    assert not set(DYNAMIC_IMPORTS) - set(found), (
        f"DYNAMIC_IMPORTS lists calls no longer there: {set(DYNAMIC_IMPORTS) - set(found)}"
    )


def test_nothing_imports_run_or_cli() -> None:
    """Only cli imports run and cli, but for the notebook route's rendering through the stages."""
    for path in MODULES:
        if _part(path) in ("run", "cli"):
            continue
        for name in _imports(path):
            if _part(path) == "arrays" and (
                name == "sitecal.run.stages" or name.startswith("sitecal.run.stages.")
            ):
                continue
            assert not name.startswith(("sitecal.run", "sitecal.cli")), f"{path} imports {name}"


@pytest.mark.parametrize("package", ["sitecal.metrics", "sitecal.stats", "sitecal.calibration"])
def test_the_numeric_core_imports_no_heavy_library(package: str) -> None:
    """Importing the numeric core in a fresh interpreter loads no torch, MONAI, pydicom or reportlab."""
    import subprocess
    import sys

    heavy = ("torch", "monai", "pydicom", "reportlab", "matplotlib", "yaml", "pydantic")
    code = (
        f"import sys, {package}; "
        f"print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in {heavy!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"import {package} loads {out.stdout.strip()}"


def test_importing_results_loads_no_heavy_library() -> None:
    """The typed documents are read and written without torch, MONAI, pydicom, reportlab or matplotlib."""
    import importlib.util
    import subprocess
    import sys

    if importlib.util.find_spec("sitecal.results") is None:
        pytest.skip("sitecal.results does not exist yet: the rule applies once it does")
    heavy = tuple(sorted(FORBIDDEN_LIBRARIES["results"]))
    code = (
        "import sys, sitecal.results; "
        f"print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in {heavy!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"import sitecal.results loads {out.stdout.strip()}"


# -- each rule reports what it forbids, on small synthetic sources --


@pytest.mark.parametrize(
    ("source", "reported"),
    [
        ("import json\n", ["line 1: imports json"]),
        ("from pathlib import Path\n", ["line 1: imports pathlib.Path"]),
        ("import os.path\n", ["line 1: imports os.path"]),
        ("from os import remove\n", ["line 1: imports os.remove"]),
        ("import os\nos.remove('x')\n", ["line 2: uses os.remove (only ['cpu_count', 'sched_getaffinity'])"]),
        (
            "import os as o\nn = o.environ\n",
            ["line 2: uses os.environ (only ['cpu_count', 'sched_getaffinity'])"],
        ),
        ("import io, pickle\n", ["line 1: imports io", "line 1: imports pickle"]),
        ("with open('f') as f:\n    pass\n", ["line 1: calls builtins.open"]),
        ("import numpy as np\nnp.save('f', x)\n", ["line 2: calls numpy.save"]),
        ("from numpy import loadtxt\nloadtxt('f')\n", ["line 2: calls numpy.loadtxt"]),
        ("x.tofile('f')\n", ["line 1: calls .tofile"]),
        ("import os\nn = os.cpu_count()\n", []),  # the one question the core may ask os
        ("import numpy as np\nf = np.load\n", []),  # named, not called: reported where it is called
        ("from re import compile\nr = compile('x')\nimage.open()\n", []),
    ],
)
def test_numeric_io_check_reports_io(source: str, reported: list[str]) -> None:
    assert numeric_io_problems(source) == reported


def test_dynamic_imports_are_found_however_spelled() -> None:
    source = """import importlib
import importlib.util as u
from importlib import import_module as im
import builtins
importlib.import_module("sitecal.run")
im(name)
__import__("os")
builtins.__import__("sys")
spec = u.spec_from_file_location("m", path)
spec.loader.exec_module(module)
exec("x = 1")
eval("1 + 1")
model.eval()
u.find_spec("numpy")
importlib.import_module(name="sitecal.cli")
"""
    assert dynamic_imports(source) == [
        (5, "importlib.import_module", "sitecal.run"),
        (6, "importlib.import_module", None),
        (7, "builtins.__import__", "os"),
        (8, "builtins.__import__", "sys"),
        (9, "importlib.util.spec_from_file_location", None),
        (10, "<loader>.exec_module", None),
        (11, "builtins.exec", None),
        (12, "builtins.eval", None),
        (15, "importlib.import_module", "sitecal.cli"),
    ]


def test_a_dynamic_import_of_a_constant_name_obeys_the_layers() -> None:
    source = 'import importlib\nrun = importlib.import_module("sitecal.run")\n'
    names = imports_of(source, ["sitecal", "report"])
    assert "sitecal.run" in names
    assert layer_problems("report", names) == ["(report) must not import sitecal.run"]


@pytest.mark.parametrize(
    ("part", "names", "reported"),
    [
        ("results", {"sitecal.evaluation"}, ["(results) must not import sitecal.evaluation"]),
        ("results", {"sitecal.cohort.labels"}, ["(results) must not import sitecal.cohort.labels"]),
        ("results", {"torch"}, ["imports torch: results never loads torch"]),
        ("results", {"json", "pathlib", "sitecal.metrics", "sitecal._io"}, []),
        (
            "cohort",
            {"sitecal.results"},
            ["imports sitecal.results: only " + str(sorted(IMPORTED_ONLY_BY["results"])) + " import results"],
        ),
        (
            "metrics",
            {"sitecal.results"},
            ["imports sitecal.results: only " + str(sorted(IMPORTED_ONLY_BY["results"])) + " import results"],
        ),
        ("evaluation", {"sitecal.results"}, []),
        ("report", {"sitecal.results", "sitecal.metrics.registry"}, []),
        ("report", {"sitecal.metrics"}, ["(report) must not import sitecal.metrics"]),
        ("protocol", {"sitecal.metrics._scores"}, ["(protocol) must not import sitecal.metrics._scores"]),
        ("stats", {"pydicom"}, ["imports pydicom: stats never loads pydicom"]),
        ("stats", {"sitecal.nowhere"}, ["imports unknown sitecal part sitecal.nowhere"]),
    ],
)
def test_layer_rules_report_what_they_forbid(part: str, names: set[str], reported: list[str]) -> None:
    assert layer_problems(part, names) == reported
