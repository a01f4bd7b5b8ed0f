// The Rollouts view's measurement charts (deployment page and fleet tab): plain SVG, no charting library.
"use strict";

// ------------------------------------------------------------------------------------------ charts
// Each check's measurements over the rounds, as plain SVG: its line (the threshold, or the bound the baseline made)
// dashed, each measurement a dot
// in its verdict's colour (a hollow one at the bottom when nothing could be measured), and under the plot one
// mark per round in the colour of that round's verdict (over all checks).
const SVG = "http://www.w3.org/2000/svg";
const CHART = { width: 280, height: 96, left: 44, right: 8, top: 8, plot: 62, band: 8 };

function svgEl(tag, attrs, ...children) {
  const element = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs || {})) if (value !== null && value !== undefined) element.setAttribute(name, String(value));
  for (const child of children.flat()) if (child !== null && child !== undefined) element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return element;
}

function chartNumber(value, unit) {
  if (value === null || value === undefined) return "no value";
  const text = Math.abs(value) >= 100 ? String(Math.round(value)) : String(Number(value.toPrecision(3)));
  return `${text}${unit || ""}`;
}

function measurementChart(chart) {
  const points = chart.points || [];
  const rounds = (chart.rounds || []).map((item) => item.round);
  const all = [...new Set([...rounds, ...points.map((point) => point.round)])].filter((round) => round !== null && round !== undefined).sort((a, b) => a - b);
  const values = points.map((point) => point.value).filter((value) => value !== null && value !== undefined);
  if (chart.threshold !== null && chart.threshold !== undefined) values.push(chart.threshold);
  let low = values.length ? Math.min(0, ...values) : 0, high = values.length ? Math.max(...values) : 1;
  if (high === low) high = low + 1;
  high += (high - low) * 0.1;
  const width = CHART.width - CHART.left - CHART.right;
  const x = (round) => CHART.left + (all.length <= 1 ? width / 2 : (all.indexOf(round) / (all.length - 1)) * width);
  const y = (value) => CHART.top + CHART.plot - ((value - low) / (high - low)) * CHART.plot;
  const bottom = CHART.top + CHART.plot;
  const tone = (verdict) => verdict === "passed" ? "ok" : verdict === "failed" ? "bad" : "warn";
  const measured = points.filter((point) => point.value !== null && point.value !== undefined);
  const parts = [
    svgEl("line", { x1: CHART.left, y1: bottom, x2: CHART.left + width, y2: bottom, class: "axis" }),
    svgEl("text", { x: CHART.left - 4, y: CHART.top + 8, class: "tick", "text-anchor": "end" }, chartNumber(high, chart.unit)),
    svgEl("text", { x: CHART.left - 4, y: bottom, class: "tick", "text-anchor": "end" }, chartNumber(low, chart.unit)),
  ];
  if (chart.threshold !== null && chart.threshold !== undefined) {
    // The line the verdicts were drawn against: the fixed threshold, the bound a baseline condition made from the
    // baseline, or the rate test's tolerated rate; labelled with what it is.
    const kind = chart.line_kind || "threshold", label = chart.line_label || chart.condition;
    parts.push(svgEl("line", { x1: CHART.left, y1: y(chart.threshold), x2: CHART.left + width, y2: y(chart.threshold), class: `threshold ${kind}`, "data-threshold": chart.threshold, "data-line-kind": kind },
      svgEl("title", {}, `${kind === "threshold" ? "threshold" : kind === "baseline" ? "from the baseline" : "tolerated (rate test)"}: ${label}`)));
    parts.push(svgEl("text", { x: CHART.left + width, y: y(chart.threshold) - 3, class: "tick", "text-anchor": "end", "data-line-label": kind }, label));
  }
  if (measured.length > 1) parts.push(svgEl("polyline", { points: measured.map((point) => `${x(point.round)},${y(point.value)}`).join(" "), class: "series" }));
  for (const point of points) {
    const missing = point.value === null || point.value === undefined;
    parts.push(svgEl("circle", { cx: x(point.round), cy: missing ? bottom : y(point.value), r: 3.5, class: `dot ${tone(point.verdict)}${missing ? " missing" : ""}`, "data-round": point.round, "data-verdict": point.verdict },
      svgEl("title", {}, `round ${point.round}: ${chartNumber(point.value, chart.unit)} (${chart.condition}): ${point.verdict}`)));
  }
  for (const item of chart.rounds || []) {
    parts.push(svgEl("rect", { x: x(item.round) - 5, y: bottom + 6, width: 10, height: CHART.band, rx: 2, class: `round ${tone(item.verdict)}`, "data-round-verdict": item.verdict },
      svgEl("title", {}, `round ${item.round}: ${item.verdict}`)));
    parts.push(svgEl("text", { x: x(item.round), y: bottom + 6 + CHART.band + 10, class: "tick", "text-anchor": "middle" }, String(item.round)));
  }
  const svg = svgEl("svg", { viewBox: `0 0 ${CHART.width} ${CHART.height + 14}`, width: CHART.width, height: CHART.height + 14, role: "img",
    "aria-label": `${chart.check}: ${points.length} measurement${points.length === 1 ? "" : "s"}, ${chart.line_kind === "baseline" || chart.line_kind === "tolerated" ? chart.line_label : `threshold ${chart.condition || "none"}`}` }, parts);
  return h("figure", { class: "chart", "data-chart": chart.check, "data-chart-verdict": chart.verdict },
    h("figcaption", { class: "small" }, badge(chart.verdict), " ", chart.check, h("span", { class: "muted" }, ` ${chart.condition}`)), svg);
}

function chartsBlock(analysis) {
  const charts = analysis && analysis.charts;
  if (!charts || !charts.length) return null;
  const total = analysis.measurements_total, shown = charts.reduce((sum, chart) => sum + chart.points.length, 0);
  return h("div", { class: "charts" }, charts.map(measurementChart),
    total && total > shown ? h("div", { class: "muted small" }, `the latest ${shown} of ${total} measurements`) : null);
}
