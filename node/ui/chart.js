// Bar charts drawn as inline SVG with the DOM: no library, and every label is set
// as text.

const NS = "http://www.w3.org/2000/svg";

function svg(tag, attrs = {}, text) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = String(text);
  return e;
}

// barChart draws values (one bar each) over labels, with the highest value on the
// axis and each bar's value as its tooltip. fmt formats a value; cls is a class for
// the bars ("err" draws them red).
export function barChart(values, labels, fmt = String, cls = "") {
  const W = 480, H = 180, left = 56, bottom = 22, top = 10, right = 6;
  const w = W - left - right, h = H - top - bottom;
  const max = Math.max(0, ...values.filter(Number.isFinite));
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img" });
  root.append(svg("title", {}, `${labels[0] ?? ""} – ${labels[labels.length - 1] ?? ""}, highest ${fmt(max)}`));
  root.append(svg("line", { class: "axis", x1: left, y1: top + h, x2: left + w, y2: top + h }));
  root.append(svg("line", { class: "axis", x1: left, y1: top, x2: left, y2: top + h }));
  root.append(svg("text", { x: left - 4, y: top + 8, "text-anchor": "end" }, fmt(max)));
  root.append(svg("text", { x: left - 4, y: top + h, "text-anchor": "end" }, fmt(0)));
  const step = w / Math.max(1, values.length);
  values.forEach((v, i) => {
    const bh = max > 0 && Number.isFinite(v) ? (v / max) * h : 0;
    const bar = svg("rect", { class: "bar " + cls, x: left + i * step + 1, y: top + h - bh, width: Math.max(1, step - 2), height: bh });
    bar.append(svg("title", {}, `${labels[i] ?? ""}: ${fmt(v)}`));
    root.append(bar);
  });
  // A few labels under the axis.
  const every = Math.max(1, Math.ceil(values.length / 6));
  for (let i = 0; i < values.length; i += every) {
    root.append(svg("text", { x: left + i * step + step / 2, y: H - 6, "text-anchor": "middle" }, labels[i] ?? ""));
  }
  if (max === 0) root.append(svg("text", { x: left + w / 2, y: top + h / 2, "text-anchor": "middle" }, "nothing in this range"));
  return root;
}
