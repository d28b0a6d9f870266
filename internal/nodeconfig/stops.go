package nodeconfig

import (
	"fmt"

	"go.yaml.in/yaml/v3"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/node"
)

// An agent's stop conditions in an agents file (besides max_steps):
//
//	agents:
//	  researcher:
//	    max_tokens: 20000      # the token budget of a task that sets none
//	    loop_repeats: 3        # stop at the 3rd request of the same call; 0: never
//	    loop_stale_steps: 4    # stop after 4 steps in a row without new results; 0: never
//	    max_cost_usd: 0.50     # the cost budget of a task that sets none, by the price table
//	    max_subagents: 16      # the sub-agents (delegate calls) one task may start itself
//
// Absent, a field is the node's default: no token budget, loop detection at
// actors.DefaultLoopRepeats and actors.DefaultLoopStaleSteps.

// stopFieldNames are the agent fields of stop conditions.
var stopFieldNames = []string{"max_tokens", "loop_repeats", "loop_stale_steps", "max_cost_usd", "max_subagents"}

// maxLoopSetting bounds loop_repeats and loop_stale_steps.
const maxLoopSetting = 1000

// parseStopField sets the stop condition field k (one of stopFieldNames) of a from
// v; who (`agent "NAME"`, `team "NAME"`) is whose field it is, for the error.
func parseStopField(path, who string, a *DeclaredAgent, k, v *yaml.Node) error {
	var n int
	ok := v.Kind == yaml.ScalarNode && v.Tag == "!!int" && v.Decode(&n) == nil
	fail := func(want string) error {
		return &AgentsFileError{Path: path, Line: v.Line, Msg: fmt.Sprintf("%s: %s %q: want %s", who, k.Value, v.Value, want)}
	}
	switch k.Value {
	case "max_cost_usd":
		var usd float64
		if v.Kind != yaml.ScalarNode || (v.Tag != "!!int" && v.Tag != "!!float") || v.Decode(&usd) != nil || !(usd > 0 && usd <= node.MaxCostBudget) {
			return fail(fmt.Sprintf("a number of US dollars above 0, at most %d (the cost of a task's model calls, by the price table)", node.MaxCostBudget))
		}
		a.MaxCostUSD = usd
	case "max_tokens":
		if !ok || n < 1 || n > node.MaxTokenBudget {
			return fail(fmt.Sprintf("an integer from 1 to %d (prompt and completion tokens of a task together)", node.MaxTokenBudget))
		}
		a.MaxTokens = n
	case "max_subagents":
		if !ok || n < 1 || n > node.MaxSubAgentsBound {
			return fail(fmt.Sprintf("an integer from 1 to %d (the sub-agents one task may start itself; absent: %d)", node.MaxSubAgentsBound, node.DefaultMaxSubAgents))
		}
		a.MaxSubAgents = n
	case "loop_repeats":
		if !ok || n == 1 || n < 0 || n > maxLoopSetting {
			return fail(fmt.Sprintf("0 (off) or an integer from 2 to %d: the request of the same call that stops the task", maxLoopSetting))
		}
		a.LoopRepeats = &n
	case "loop_stale_steps":
		if !ok || n < 0 || n > maxLoopSetting {
			return fail(fmt.Sprintf("0 (off) or an integer from 1 to %d: the steps in a row without new information that stop the task", maxLoopSetting))
		}
		a.LoopStaleSteps = &n
	}
	return nil
}

// loopSetting is a loop detection field as node.NamedAgent takes it: 0 for the
// default (absent), actors.LoopOff for off (0 in the file).
func loopSetting(n *int) int {
	switch {
	case n == nil:
		return 0
	case *n == 0:
		return actors.LoopOff
	}
	return *n
}

// validateStops reports the configuration file's stop conditions out of range.
func (fc File) validateStops() []error {
	var errs []error
	if !(fc.MaxCostUSD >= 0 && fc.MaxCostUSD <= node.MaxCostBudget) {
		errs = append(errs, fmt.Errorf("max_cost_usd: %g is out of range: want above 0 and at most %d US dollars (0 or absent: no budget)", fc.MaxCostUSD, node.MaxCostBudget))
	}
	if fc.MaxTokens < 0 || fc.MaxTokens > node.MaxTokenBudget {
		errs = append(errs, fmt.Errorf("max_tokens: %d is out of range: want 1 to %d (0 or absent: no budget)", fc.MaxTokens, node.MaxTokenBudget))
	}
	if r := fc.LoopRepeats; r != nil && (*r < 0 || *r == 1 || *r > maxLoopSetting) {
		errs = append(errs, fmt.Errorf("loop_repeats: %d is out of range: want 0 (off) or 2 to %d (absent: %d)", *r, maxLoopSetting, actors.DefaultLoopRepeats))
	}
	if s := fc.LoopStaleSteps; s != nil && (*s < 0 || *s > maxLoopSetting) {
		errs = append(errs, fmt.Errorf("loop_stale_steps: %d is out of range: want 0 (off) or 1 to %d (absent: %d)", *s, maxLoopSetting, actors.DefaultLoopStaleSteps))
	}
	return errs
}
