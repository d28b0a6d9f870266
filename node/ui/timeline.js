// A session's timeline laid out as rows: each event under the event that caused
// it. Pure functions over the events (no DOM), which app.js draws.

// MAX_NEST is the deepest a timeline's event is indented: a step's events are
// caused by the step before, so a long session's chain would run off the page.
export const MAX_NEST = 24;

// nest builds the timeline: each event under the event that caused it.
export function nest(events) {
  const byID = new Map();
  const roots = [];
  for (const e of events) {
    const node = { e, children: [] };
    const parent = e.causation_id && e.causation_id !== e.id ? byID.get(e.causation_id) : undefined;
    (parent ? parent.children : roots).push(node);
    byID.set(e.id, node);
  }
  return roots;
}

// A layout is the timeline as rows, each event under the event that caused it
// (depth its indentation; past MAX_NEST levels the events go on at that level),
// the context line of a model call a row of its own. index maps an event's id to
// its row (which holds its depth); count is how many events are laid out; path is
// the last row's event and its causes (its ancestors), the events after which an
// event caused by one of them goes at the end of the rows.
export function layOut(events) {
  const l = { rows: [], index: new Map(), parent: new Map(), count: events.length, path: [], onPath: new Map() };
  // With a stack of its own, not the call stack: each step of a session is caused
  // by the one before, so its chain is as deep as the session is long.
  const stack = [{ nodes: nest(events), depth: 0, i: 0, parent: null }];
  while (stack.length) {
    const top = stack[stack.length - 1];
    if (top.i >= top.nodes.length) { stack.pop(); continue; }
    const { e, children } = top.nodes[top.i++];
    addRow(l, e, top.depth, top.parent);
    if (children.length) stack.push({ nodes: children, depth: Math.min(top.depth + 1, MAX_NEST), i: 0, parent: e });
  }
  // (Bounded: two events of one id, which no log writes, could make a loop.)
  for (let e = l.rows.length ? l.rows[l.rows.length - 1].e : null; e && l.path.length < l.rows.length; e = l.parent.get(e.id)) l.path.push(e);
  l.path.reverse();
  l.path.forEach((e, i) => l.onPath.set(e.id, i));
  return l;
}

function addRow(l, e, depth, parent) {
  l.index.set(e.id, l.rows.length);
  l.parent.set(e.id, parent);
  l.rows.push({ e, depth });
  if (e.type === "model.requested" && e.payload && e.payload.context) l.rows.push({ e, depth, ctx: true });
}

// extend lays out the events after the layout's count at the end of its rows,
// in the common case where each is caused by the last row's event or one of its
// causes, or by none laid out: a page of events costs its own length, not the
// session's. It is false (the layout half extended) when an event goes between
// rows: then the events are laid out again.
export function extend(l, events) {
  for (; l.count < events.length; l.count++) {
    const e = events[l.count];
    // Its cause, if laid out before it (as nest takes it).
    const id = e.causation_id && e.causation_id !== e.id ? e.causation_id : "";
    const cause = id && l.index.has(id) ? l.rows[l.index.get(id)] : null;
    const c = cause ? cause.e : null;
    let depth = 0;
    if (c) {
      const at = l.onPath.get(c.id);
      if (at === undefined) return false;
      while (l.path.length > at + 1) l.onPath.delete(l.path.pop().id);
      depth = Math.min(cause.depth + 1, MAX_NEST);
    } else {
      l.path = [];
      l.onPath = new Map();
    }
    addRow(l, e, depth, c);
    l.onPath.set(e.id, l.path.length);
    l.path.push(e);
  }
  return true;
}
