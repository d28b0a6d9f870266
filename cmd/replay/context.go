package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// maxContextLines bounds the items replay show lists of one model call's context,
// per list (kept, dropped): the rest are counted.
const maxContextLines = 20

// renderContext prints the report of a model call's context under its step: the
// budget and what was used, then one line per item, kept (+), truncated (~) and
// dropped (-), with its tokens and score, and why a dropped one was.
func renderContext(w io.Writer, r *messages.ContextReport, indent string) {
	var head strings.Builder
	fmt.Fprintf(&head, "%scontext: used %d of %d tokens (window %d, reserved %d, system %d); %d kept", indent, r.Used, r.Budget, r.Window, r.Reserved, r.System, len(r.Kept))
	if len(r.Truncated) > 0 {
		fmt.Fprintf(&head, ", %d truncated", len(r.Truncated))
	}
	fmt.Fprintf(&head, ", %d dropped", len(r.Dropped))
	if r.Older > 0 {
		fmt.Fprintf(&head, ", %d older turns not considered", r.Older)
	}
	if r.Over > 0 {
		fmt.Fprintf(&head, "; OVER BUDGET by %d", r.Over)
	}
	fmt.Fprint(w, node.EscapeControls(head.String()+"\n"))
	truncated := make(map[string]messages.ContextItem, len(r.Truncated))
	for _, t := range r.Truncated {
		truncated[t.ID] = t
	}
	list := func(items []messages.ContextItem, mark, what string) {
		for i, it := range items {
			if i == maxContextLines {
				fmt.Fprintf(w, "%s  … %d more %s\n", indent, len(items)-i, what)
				return
			}
			m, note := mark, ""
			if t, ok := truncated[it.ID]; ok && mark == "+" {
				m, note = "~", fmt.Sprintf("  cut from %d", t.From)
			}
			if it.Reason != "" {
				note = "  " + clip(it.Reason)
			}
			// Its ID, kind and reason clipped as a step's texts are (clip): a
			// report of an imported file is anyone's.
			fmt.Fprint(w, node.EscapeControls(fmt.Sprintf("%s  %s %-22s %-8s %6d tok  %.3f%s\n", indent, m, clip(it.ID), clip(it.Kind), it.Tokens, it.Score, note)))
		}
	}
	list(r.Kept, "+", "kept")
	list(r.Dropped, "-", "dropped")
	if len(r.Summarize) > 0 {
		ids := make([]string, len(r.Summarize))
		for i, id := range r.Summarize {
			ids[i] = clip(id)
		}
		fmt.Fprint(w, node.EscapeControls(fmt.Sprintf("%s  to summarise: %s\n", indent, strings.Join(ids, ", "))))
	}
	for _, n := range r.Notes {
		// Whole (a retrieval's error may say much), on its line.
		fmt.Fprint(w, node.EscapeControls(fmt.Sprintf("%s  note: %s\n", indent, strings.ReplaceAll(n, "\n", " "))))
	}
}
