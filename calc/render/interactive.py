"""The report's interactive section: controls that recompute every model's memory in the page.

The page embeds each model's exact coefficients (calc/analysis/coefficients.py) as JSON, inside a
`<script type="application/json">` block whose text can never end the element (`<` is written
`\\u003c`), and one inline script with no source of its own: it multiplies the coefficients as
BigInt (the figures are the CLI's integers), writes them into a real HTML table with `textContent`
only (a model's name is text, never markup), and keeps its state in the URL fragment
(`#seq=131072&batch=4&gpus=2xH100-80GB&weights=fp8&kv=fp16&engine=llamacpp`) so a view can be shared.
The page still opens offline: nothing is fetched.
"""

from __future__ import annotations

import html
import json
from typing import Any

from calc.analysis.coefficients import KV_CHOICES, TP_CHOICES, WEIGHT_CHOICES

__all__ = ["SCRIPT", "interactive_section"]

# `sizes(data, state)` is pure (the tests run it under node against `gptcalc memory --json`); the rest
# reads the controls, writes the table and the fragment.
SCRIPT = r"""
const LLAMACPP_CELLS = 256n;  // llama.cpp pads its context to 256 cells (calc/analysis/memory/engines.py)
function minBig(a, b) { return a < b ? a : b; }
function sizes(data, state) {
  let seq = BigInt(state.seq), batch = BigInt(state.batch);
  if (state.engine === "llamacpp") seq = (seq + LLAMACPP_CELLS - 1n) / LLAMACPP_CELLS * LLAMACPP_CELLS;
  const gpu = data.gpus.find(g => g.name === state.gpu), count = String(state.count);
  return data.models.map(m => {
    if (state.engine === "llamacpp" && !m.llamacpp)  // as `memory --engine llamacpp` refuses it (llamacpp.py)
      return {name: m.name, refused: "llama.cpp has no architecture for it"};
    const at = m.tp[count];
    if (!at) return {name: m.name, refused: "tp " + count + " does not divide its query heads"};
    const weights = BigInt(at.weights[state.weights]), kv = at.kv[state.kv];
    if (state.engine === "trtllm" && kv.state !== "0")  // as `memory --engine trtllm` refuses it (engines.py)
      return {name: m.name, refused: "how " + state.engine + " pages its conv and recurrent states is not modelled"};
    let rows = 0n;
    for (const [perToken, window] of kv.rows) {
      const w = BigInt(window);
      rows += BigInt(perToken) * (w > 0n ? minBig(seq, w) : seq);
    }
    const cache = (rows + BigInt(kv.state)) * batch, total = weights + cache;
    return {name: m.name, weights: weights, kv: cache, total: total, headroom: BigInt(gpu.bytes) - total,
            beyond: seq > BigInt(m.context)};
  });
}
//! end of sizes
function grouped(n) { const s = (n < 0n ? -n : n).toString().replace(/\B(?=(\d{3})+(?!\d))/g, ","); return (n < 0n ? "-" : "") + s; }
function gib(n) { return (Number(n) / 2 ** 30).toFixed(2) + " GiB"; }
function readState(form) {
  const state = {};
  for (const el of form.elements) if (el.name) state[el.name] = el.value;
  return state;
}
function writeFragment(state) {
  const gpus = state.count + "x" + state.gpu;
  const parts = ["seq=" + state.seq, "batch=" + state.batch, "gpus=" + encodeURIComponent(gpus),
                 "weights=" + encodeURIComponent(state.weights), "kv=" + state.kv, "engine=" + state.engine];
  history.replaceState(null, "", "#" + parts.join("&"));
}
function readFragment(form, data) {
  const params = new URLSearchParams(location.hash.slice(1));
  const set = (name, value) => { const el = form.elements[name]; if (el && value !== null) el.value = value; };
  set("seq", params.get("seq")); set("batch", params.get("batch")); set("weights", params.get("weights"));
  set("kv", params.get("kv")); set("engine", params.get("engine"));
  const gpus = params.get("gpus");
  if (gpus) {
    const match = /^(\d+)x(.+)$/.exec(gpus);
    set("count", match ? match[1] : "1");
    const name = match ? match[2] : gpus, gpu = data.gpus.find(g => g.name.toLowerCase() === name.toLowerCase());
    if (gpu) set("gpu", gpu.name);
  }
}
function cell(row, text, cls) { const td = row.insertCell(); td.textContent = text; if (cls) td.className = cls; return td; }
function update(form, data) {
  const state = readState(form), body = document.getElementById("sizing-body");
  if (!/^[1-9]\d{0,15}$/.test(state.seq) || !/^[1-9]\d{0,15}$/.test(state.batch)) return;
  writeFragment(state);
  body.replaceChildren();
  for (const r of sizes(data, state)) {
    const row = body.insertRow();
    cell(row, r.name);
    if (r.refused) { cell(row, r.refused).colSpan = 5; continue; }
    cell(row, grouped(r.weights) + " B", "num"); cell(row, grouped(r.kv) + " B", "num");
    cell(row, grouped(r.total) + " B (" + gib(r.total) + ")", "num");
    cell(row, r.headroom >= 0n ? "yes" : "no", r.headroom >= 0n ? "yes" : "no");
    cell(row, grouped(r.headroom) + " B", "num");
    if (r.beyond) row.title = "longer than the model's context";
  }
}
document.addEventListener("DOMContentLoaded", () => {
  const data = JSON.parse(document.getElementById("sizing-data").textContent);
  const form = document.getElementById("sizing");
  readFragment(form, data);
  form.addEventListener("input", () => update(form, data));
  window.addEventListener("hashchange", () => { readFragment(form, data); update(form, data); });
  update(form, data);
});
"""


def _options(name: str, values: list[tuple[str, str]], chosen: str) -> str:
    options = "".join(f"<option value='{html.escape(value, quote=True)}'{' selected' if value == chosen else ''}>"
                      f"{html.escape(label)}</option>" for value, label in values)
    return f"<select name='{name}'>{options}</select>"


def interactive_section(models: list[dict[str, Any]], gpus: list[Any], seq: int, kv_dtype: str) -> str:
    """The controls, the table the script fills, and the embedded data (the page's only script)."""
    data = {"models": models, "gpus": [{"name": g.name, "bytes": str(g.bytes)} for g in gpus]}
    blob = json.dumps(data, ensure_ascii=True, sort_keys=True).replace("<", "\\u003c")
    kv = kv_dtype if kv_dtype in KV_CHOICES else "fp16"
    controls = " ".join([
        f"<label>context <input name='seq' value='{seq}' inputmode='numeric' size='9'></label>",
        "<label>batch <input name='batch' value='1' inputmode='numeric' size='5'></label>",
        "<label>weights " + _options("weights", [(w, w) for w in WEIGHT_CHOICES], "as stored") + "</label>",
        "<label>KV cache " + _options("kv", [(k, k) for k in KV_CHOICES], kv) + "</label>",
        "<label>GPU " + _options("gpu", [(g.name, g.name) for g in gpus], "H100-80GB") + "</label>",
        "<label>count " + _options("count", [(str(n), str(n)) for n in TP_CHOICES], "1") + "</label>",
        "<label>engine " + _options("engine", [(e, e) for e in ("none", "vllm", "sglang", "trtllm", "llamacpp")],
                                    "none") + "</label>",
    ])
    return (
        "<h2>Try another context, batch, format or GPU</h2>\n"
        "<p class='note'>Weights + KV cache per GPU (tensor parallel over the GPU count), recomputed here from "
        "each model's exact coefficients; the same integers as <code>gptcalc memory MODEL --seq S --batch B "
        "--budget NxGPU</code>. The state is in the address (#seq=...), so a view can be shared.</p>\n"
        f"<form id='sizing' onsubmit='return false'>{controls}</form>\n"
        "<table id='sizing-table'><thead><tr><th>model</th><th>weights per GPU</th><th>KV cache per GPU</th>"
        "<th>total per GPU</th><th>fits</th><th>headroom</th></tr></thead><tbody id='sizing-body'></tbody></table>\n"
        f"<script type='application/json' id='sizing-data'>{blob}</script>\n"
        f"<script>{SCRIPT}</script>\n"
    )
