package nodeconfig

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/troupe-run/troupe/actors"
)

// ContextFile bounds what an agent's model calls are sent (actors.ContextOptions):
// the configuration file's "context" (the default agent's, and the default of the
// named agents' fields that they do not set), or an agents file's agent's:
//
//	agents:
//	  researcher:
//	    context:
//	      window: 32000          # the model's context window, in tokens
//	      reserved_output: 2000  # tokens kept for its answer
//	      history_turns: 40      # latest conversation messages considered; "all" for every one
//	      evidence: 5            # chunks of its knowledge base retrieved for each task (0: none)
//	      recall: 5              # memories of its namespace recalled for each task (0: none)
//	      notes: 3               # its notes found for each task (0: none)
//
// Absent, a field is the default: actors.ContextOptions' zero value; for
// evidence, recall and notes the node's (package node: 5 chunks for an agent with
// a knowledge base and the rag tool, 5 memories for one with the memory tool, no
// notes). A task gathers them before its first model call (actors/gather.go).
type ContextFile struct {
	Window         int `json:"window,omitempty"`
	ReservedOutput int `json:"reserved_output,omitempty"`
	// HistoryTurns is history_turns; negative ("all" in an agents file) for all.
	HistoryTurns int `json:"history_turns,omitempty"`
	// CompressionFile is the conversation compression (compress.go).
	CompressionFile
	// Evidence, Recall and Notes are how many items of each source a task
	// gathers; nil: the default, 0: none.
	Evidence *int `json:"evidence,omitempty"`
	Recall   *int `json:"recall,omitempty"`
	Notes    *int `json:"notes,omitempty"`
}

// contextFieldNames are the fields of a context section.
var contextFieldNames = append(append([]string{"window", "reserved_output", "history_turns"}, compressionFieldNames...), "evidence", "recall", "notes")

// Options returns the section as actors takes it: an absent gathering number 0
// (the default), a 0 actors.GatherOff.
func (c ContextFile) Options() actors.ContextOptions {
	gather := func(n *int) int {
		switch {
		case n == nil:
			return 0
		case *n <= 0:
			return actors.GatherOff
		}
		return *n
	}
	return actors.ContextOptions{Window: c.Window, ReservedOutput: c.ReservedOutput, HistoryTurns: c.HistoryTurns,
		Compression: c.Compression(), Evidence: gather(c.Evidence), Recall: gather(c.Recall), Notes: gather(c.Notes)}
}

// validateGather reports the section's gathering numbers out of range.
func (c ContextFile) validateGather() error {
	for _, f := range []struct {
		name   string
		n      *int
		max    int
		source string
	}{{"evidence", c.Evidence, actors.MaxEvidence, "chunks of the knowledge base"}, {"recall", c.Recall, actors.MaxRecall, "memories"},
		{"notes", c.Notes, actors.MaxNotes, "notes"}} {
		if f.n != nil && (*f.n < 0 || *f.n > f.max) {
			return fmt.Errorf("%s %d: want the %s gathered for each task, an integer from 0 (none) to %d", f.name, *f.n, f.source, f.max)
		}
	}
	return nil
}

// validateContext reports the configuration file's context section out of range.
func (fc File) validateContext() []error {
	if err := fc.Context.validateGather(); err != nil {
		return []error{fmt.Errorf("context: %w", err)}
	}
	if err := fc.Context.validateRanges(); err != nil {
		return []error{fmt.Errorf("context: %w", err)}
	}
	if f := fc.Context.settingWithoutStrategy(); f != "" {
		return []error{fmt.Errorf("context: %w", withoutStrategyError(f, "with none the conversation is sent whole (as history_turns cuts it)"))}
	}
	if err := fc.Context.validateTurns(); err != nil { // before Options, whose check of the same says less
		return []error{fmt.Errorf("context: %w", err)}
	}
	if err := fc.Context.Options().Validate(); err != nil {
		return []error{fmt.Errorf("context: %w", err)}
	}
	if err := fc.Context.validateFileCompression(); err != nil {
		return []error{fmt.Errorf("context: %w", err)}
	}
	return nil
}

// parseContext reads the "context" section (v) of an agents file's agent (who is
// `agent "NAME"`) or team (`team "NAME"`), naming the line of a problem; gatherLine
// is the line of its latest gathering number (0: none).
func parseContext(path, who string, v *yaml.Node) (c ContextFile, gatherLine int, err error) {
	fail := func(line int, format string, args ...any) (ContextFile, int, error) {
		return ContextFile{}, 0, &AgentsFileError{Path: path, Line: line, Msg: who + ": context: " + fmt.Sprintf(format, args...)}
	}
	if v.Kind != yaml.MappingNode {
		return fail(v.Line, "want a mapping of %s, such as context: {window: 32000}", strings.Join(contextFieldNames, ", "))
	}
	seen := map[string]bool{}
	lines := map[string]int{} // of the fields, by name
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, fv := v.Content[i], v.Content[i+1]
		if seen[k.Value] {
			return fail(k.Line, "field %q is given twice", k.Value)
		}
		seen[k.Value], lines[k.Value] = true, k.Line
		var n int
		isInt := fv.Kind == yaml.ScalarNode && fv.Tag == "!!int" && fv.Decode(&n) == nil
		switch k.Value {
		case "window":
			if !isInt || n < actors.MinContextWindow || n > actors.MaxContextWindow {
				return fail(fv.Line, "window %q: want the model's context window, an integer from %d to %d tokens", fv.Value, actors.MinContextWindow, actors.MaxContextWindow)
			}
			c.Window = n
		case "reserved_output":
			if !isInt || n < 1 || n >= actors.MaxContextWindow {
				return fail(fv.Line, "reserved_output %q: want the tokens kept for the answer, an integer from 1 to less than the window", fv.Value)
			}
			c.ReservedOutput = n
		case "history_turns":
			switch {
			case fv.Kind == yaml.ScalarNode && fv.Value == "all":
				c.HistoryTurns = -1
			case !isInt || n < 1 || n > actors.MaxHistoryTurns:
				return fail(fv.Line, "history_turns %q: want the latest conversation messages considered, an integer from 1 to %d, or all", fv.Value, actors.MaxHistoryTurns)
			default:
				c.HistoryTurns = n
			}
		case "evidence", "recall", "notes":
			p := map[string]**int{"evidence": &c.Evidence, "recall": &c.Recall, "notes": &c.Notes}[k.Value]
			*p = &n
			if err := c.validateGather(); err != nil || !isInt {
				if err == nil {
					err = fmt.Errorf("%s %q: want an integer", k.Value, fv.Value)
				}
				return fail(fv.Line, "%v", err)
			}
			gatherLine = fv.Line
		default:
			if ok, problem := parseCompressionField(&c.CompressionFile, k, fv); ok {
				if problem != "" {
					return fail(fv.Line, "%s", problem)
				}
				continue
			}
			return fail(k.Line, "unknown field %q: the fields are %s", k.Value, strings.Join(contextFieldNames, ", "))
		}
	}
	if f := c.settingWithoutStrategy(); f != "" {
		return fail(lines[f], "%v", withoutStrategyError(f, "an agent that names none takes the default agent's compression whole, its settings included"))
	}
	if err := c.validateTurns(); err != nil { // a compression is the agent's whole, or the node's
		return fail(c.turnsLine, "%v", err)
	}
	if err := c.Options().ValidateFields(); err != nil { // its absent fields are the node's
		return fail(v.Line, "%v", err)
	}
	return c, gatherLine, nil
}
