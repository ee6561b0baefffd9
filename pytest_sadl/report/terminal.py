"""The terminal summary (``--sadl-report=term`` / ``term-verbose``), rendered from the results JSON."""

from __future__ import annotations

from typing import Any, Callable

from pytest_sadl.report._load import mistakes_rows, tests_summary
from pytest_sadl.results import LABELS, NEURON, SA_LABELS, SURPRISE
from pytest_sadl.results import METRICS as ORDER


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:.2f}%"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _table(rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for n, row in enumerate(rows):
        cells = [c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in enumerate(row)]
        out.append("  ".join(cells).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return out


def render_terminal(results: dict[str, Any], *, verbose: bool = False, comparison: Any = None) -> list[str]:
    """Lines of the summary: model, warnings, the metrics, Table VI by group (and, verbose,
    the tests and layers)."""
    model, config, metrics = results["model"], results["config"], results["metrics"]
    n_inputs = len(results["inputs"]["test"])
    lines = [
        f"model {model.get('name', '?')} (fingerprint {str(model.get('fingerprint', ''))[:12]}), "
        f"{model.get('n_train', '?')} training inputs, {'classifier' if model.get('classifier') else 'regression'}",
        f"SA layers: {', '.join(config['sa_layers'])}; coverage layers: {len(config['coverage_layers'])} "
        f"({', '.join(config['coverage_layers'])})",
    ]
    if n_inputs == 0:
        lines.append("no inputs were recorded: mark the tests that feed the model with @pytest.mark.sadl")
    else:
        lines.append(f"{n_inputs} inputs recorded: {tests_summary(results)}, in {len(results['groups'])} group(s)")
    warnings = results.get("outcome", {}).get("warnings", [])
    if warnings:  # before the tables: an incomplete run must not read as a complete one
        lines.append("")
        lines += [f"warning: {w}" for w in warnings]
    lines.append("")
    thresholds = results.get("thresholds", {})
    deltas = {}
    if comparison is not None:
        deltas = {d.metric: d for d in comparison.metrics}
    header = ["metric", "coverage", "covered / total", "bounds", "above upper", "threshold"]
    if deltas:
        header.append("vs baseline")
    rows = [header]
    for name in ORDER:
        m = metrics.get(name)
        if m is None:  # a results file from before this metric existed
            continue
        if not m.get("applicable", True):
            row = [LABELS[name], "n/a", "not applicable (regression model)", "", "", ""]
        else:
            bounds = above = ""
            if name in SURPRISE:
                b = config[name]
                bounds = f"({_num(b['lower'])}, {_num(b['upper'])}]"
                above = str(m.get("above", 0))
            thr = f"{thresholds[name]:.2f}%" if name in thresholds else ""
            row = [LABELS[name], _pct(m["value"]), f"{m['covered']} / {m['total']}", bounds, above, thr]
        if deltas:
            d = deltas.get(name)
            row.append("" if d is None or d.delta is None else f"{d.delta:+.2f}")
        rows.append(row)
    lines += _table(rows, right={1, 2, 4, 5, 6})
    rules = {config[k].get("rule", "") for k in SURPRISE if config.get(k)}
    if any(r.startswith("default") for r in rules):
        lines.append("bounds: " + next(r for r in rules if r.startswith("default")))

    if results["groups"]:
        lines += ["", "cumulative coverage by group (Table VI of the paper):"]
        shown = [k for k in ORDER if k in metrics]
        rows = [["group", "tests", "inputs"] + [LABELS[k] for k in shown]]
        for i, g in enumerate(results["groups"]):
            rows.append(
                [("" if i == 0 else "+ ") + g["name"], str(g["tests"]), str(g["inputs"])]
                + [_pct(g["cumulative"].get(k)).rstrip("%") for k in shown]
            )
        lines += _table(rows, right=set(range(1, 3 + len(shown))))

    found = mistakes_rows(results)
    if found is not None:
        header, table = found
        lines += ["", "does surprise predict this model's mistakes? (labelled inputs; AUC 0.5 = chance, 1 = perfect)"]
        lines += _table([["group", *header[1:]]] + table, right=set(range(1, len(header))))
        lines += [f"  {text}" for text in (results["mistakes"]["overall"].get("sentences") or [])]

    if verbose:
        lines += ["", "tests (in collection order; 'new' = LSC buckets / NC neurons first covered by the test):"]
        keys = [k for k in SA_LABELS if any(t.get(f"{k}_mean") is not None for t in results["tests"])] or ["lsa"]
        rows = [["test", "group", "outcome", "inputs"] + [f"{SA_LABELS[k]} {s}" for k in keys for s in ("mean", "max")] + ["new LSC", "new NC"]]
        for t in results["tests"]:
            rows.append(
                [t["nodeid"], t["group"], t["outcome"], str(t["inputs"])]
                + [_num(t.get(f"{k}_{s}")) for k in keys for s in ("mean", "max")]
                + [str(t["new"].get("lsc", 0)), str(t["new"].get("nc", 0))]
            )
        lines += _table(rows, right=set(range(3, len(rows[0]))))
        lines += ["", "layers (least covered first by KMNC):"]
        rows = [["layer", "neurons"] + [LABELS[k] for k in NEURON]]
        for layer in sorted(results["layers"], key=lambda l: l["kmnc"]):
            rows.append([layer["name"], str(layer["neurons"])] + [_pct(layer[k]) for k in NEURON])
        lines += _table(rows, right={1, 2, 3, 4, 5})

    return lines


def write_terminal(
    results: dict[str, Any], line: Callable[..., None], section: Callable[..., None], *, verbose: bool = False, comparison: Any = None
) -> None:
    section("pytest-sadl: surprise adequacy and neuron coverage", sep="-")
    for text in render_terminal(results, verbose=verbose, comparison=comparison):
        line(text)
