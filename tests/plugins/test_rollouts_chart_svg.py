"""The measurement charts' SVG as the page draws it (issue 32): the view's own drawing code
(``static/charts.js``) run in Node.js on the charts' JSON, with a minimal DOM that records
what it builds. The line is where the bound is (the baseline's, the rate test's tolerated rate, or the fixed
threshold), labelled with what it is, and each round's verdict is marked under the plot."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from airflow_provider.plugins.rollouts.charts import analysis_charts
from tests.plugins.test_rollouts_charts import ON_BASELINE, RATE_TESTED, RESULT

SCRIPT = Path(__file__).resolve().parents[2] / "airflow_provider" / "plugins" / "rollouts" / "static" / "charts.js"
NODE = shutil.which("node")

# Loads charts.js into a context whose `document` builds plain objects (with the `h` and `badge` it takes from the
# shared widgets), draws each chart given on stdin and prints the trees as JSON.
DRAW = r"""
const fs = require("fs"), vm = require("vm");
const source = fs.readFileSync(process.argv[process.argv.length - 1], "utf8");
class Node {}
class Element extends Node {
  constructor(tag) { super(); this.tag = tag; this.attrs = {}; this.children = []; }
  setAttribute(name, value) { this.attrs[name] = String(value); }
  append(...children) { this.children.push(...children); }
  addEventListener() {}
  set className(value) { this.attrs.class = value; }
}
class Text extends Node { constructor(text) { super(); this.text = text; } }
const document = {
  createElementNS: (ns, tag) => new Element(tag),
  createElement: (tag) => new Element(tag),
  createTextNode: (text) => new Text(String(text)),
};
function h(tag, attrs, ...children) {
  const element = new Element(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value !== null && value !== undefined) element.setAttribute(name, value);
  }
  for (const child of children.flat(Infinity)) {
    if (child !== null && child !== undefined) element.append(child instanceof Node ? child : new Text(String(child)));
  }
  return element;
}
const badge = (text) => h("span", { class: "badge" }, String(text));
const context = vm.createContext({ document, Node, h, badge });
vm.runInContext(source, context);
const charts = JSON.parse(fs.readFileSync(0, "utf8"));
process.stdout.write(JSON.stringify(charts.map((chart) => vm.runInContext("measurementChart", context)(chart))));
"""


def draw(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The figures charts.js draws for ``result``'s charts, as trees of ``tag``, ``attrs``, ``children``."""
    if NODE is None:
        pytest.skip("Node.js is not installed (apt-get install nodejs): the page's drawing code cannot run here")
    done = subprocess.run(
        [NODE, "-e", DRAW, "--", str(SCRIPT)],
        input=json.dumps(analysis_charts(result)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    figures: list[dict[str, Any]] = json.loads(done.stdout)
    return figures


def walk(node: dict[str, Any]) -> list[dict[str, Any]]:
    found = [node]
    for child in node.get("children", []):
        if "tag" in child:
            found += walk(child)
    return found


def text_of(node: dict[str, Any]) -> str:
    return "".join(child.get("text", "") if "text" in child else text_of(child) for child in node.get("children", []))


def parts(figure: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    """The figure's line, its dots and the line's label."""
    elements = walk(figure)
    [line] = [e for e in elements if e["tag"] == "line" and "threshold" in e["attrs"].get("class", "")]
    dots = [e for e in elements if e["tag"] == "circle"]
    [label] = [e for e in elements if e["tag"] == "text" and "data-line-label" in e["attrs"]]
    return line, dots, label


def line_at(line: dict[str, Any], dots: list[dict[str, Any]], low: float, high: float) -> float:
    """The value the horizontal ``line`` stands for, read off the plot's linear scale through two measured dots
    worth ``low`` and ``high``."""
    assert line["attrs"]["y1"] == line["attrs"]["y2"]
    y_line, y_low, y_high = float(line["attrs"]["y1"]), float(dots[0]["attrs"]["cy"]), float(dots[1]["attrs"]["cy"])
    return low + (y_line - y_low) / (y_high - y_low) * (high - low)


def test_a_baseline_conditions_line_is_drawn_at_the_bound_the_baseline_made_and_says_so() -> None:
    [figure] = draw(ON_BASELINE)
    line, dots, label = parts(figure)
    assert line["attrs"]["class"] == "threshold baseline" and line["attrs"]["data-line-kind"] == "baseline"
    assert line_at(line, dots, 0.09, 0.3) == pytest.approx(0.13)  # 0.08 * 1.5 + 0.01, not 0.08 nor a constant
    assert text_of(label) == "<= baseline * 1.5 + 0.01: baseline 0.08 -> <= 0.13"
    assert [dot["attrs"]["data-verdict"] for dot in dots] == ["passed", "failed"]
    rounds = [e["attrs"]["data-round-verdict"] for e in walk(figure) if e["tag"] == "rect"]
    assert rounds == ["passed", "failed"]
    assert "from the baseline" in text_of(line)


def test_the_rate_tests_line_is_drawn_at_the_tolerated_rate() -> None:
    tested = {
        **RATE_TESTED,
        "measurements": [
            {**RATE_TESTED["measurements"][0], "value": 0.01},
            {**RATE_TESTED["measurements"][0], "round": 2, "value": 0.04, "verdict": "failed"},
        ],
    }
    [figure] = draw(tested)
    line, dots, label = parts(figure)
    assert line["attrs"]["data-line-kind"] == "tolerated"
    assert line_at(line, dots, 0.01, 0.04) == pytest.approx(0.025)
    assert text_of(label) == "tolerated 0.025 (baseline 0.02)"
    assert [e["attrs"]["data-round-verdict"] for e in walk(figure) if e["tag"] == "rect"] == ["passed", "failed"]


def test_a_fixed_threshold_is_drawn_at_its_condition() -> None:
    errors, _ = draw(RESULT)
    line, dots, label = parts(errors)
    measured = [dot for dot in dots if "missing" not in dot["attrs"]["class"]]  # round 2 measured nothing
    assert line["attrs"]["data-line-kind"] == "threshold"
    assert line_at(line, measured, 0.01, 0.2) == pytest.approx(0.05)
    assert text_of(label) == "< 0.05"
