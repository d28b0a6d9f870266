package actors

import (
	"fmt"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// A session runs a model's call of a tool chain (tools.ChainTool, Agent.Chains) step
// by step, as a decision of its agent like any other:
//
//   - the call is recorded as a ToolCallRequested, as every call is, but not issued;
//   - each step is a ToolCallRequested of its own, whose Chain is the key of the
//     chain's call and ChainStep the step's name, keyed by its own seq, and issued as
//     an effect; its ToolCallCompleted is its result;
//   - once every step answered, the session records the chain call's
//     ToolCallCompleted with the chain's output (or, when a step failed, an error
//     naming the step) and that is what the model reads.
//
// A step is decided only once the steps before it answered, since its arguments are
// rendered from their results. A session restarted mid-chain refolds which steps
// answered and re-issues only the step that was requested and not answered, with its
// recorded key: a finished step is never run again.
//
// A call of call_tool (ToolCallTool, the search disclosure's) that names a chain is
// run the same way, with the arguments it gives the chain; the chain's result is
// call_tool's.

// ToolCallTool is the tool that calls another by name: the search disclosure's
// call_tool, whose arguments are a tools.NamedCall.
const ToolCallTool = "call_tool"

// addChainStep folds the request of a step into its chain's call.
func (t *taskState) addChainStep(eventID string, ts int64, key messages.EffectKey, p messages.ToolCallRequested) {
	for _, c := range t.calls {
		if c.req.Key == p.Chain && !c.done {
			c.steps = append(c.steps, &callState{eventID: eventID, ts: ts, keySeq: key.Seq, req: p})
			return
		}
	}
}

// completeChainStep folds the result of a step into its chain's call; false when p
// answers no step.
func (t *taskState) completeChainStep(p messages.ToolCallCompleted) bool {
	for _, c := range t.calls {
		for _, st := range c.steps {
			if st.req.Key == p.Key {
				if !st.done {
					st.done, st.result = true, p
				}
				return true
			}
		}
	}
	return false
}

// isChainCall reports whether the agent runs this call as a chain (rather than
// issuing it as one effect).
func (a Agent) isChainCall(r messages.ToolCallRequested) bool {
	ch, _ := a.chainOf(r)
	return ch != nil
}

// chainOf returns the chain a call runs and the chain's arguments: the called tool
// and the call's arguments, or, for a call of call_tool naming a chain, that chain
// and the arguments call_tool passes it (parsed as call_tool parses them). Nil when
// the call runs no chain; a chain's step runs none.
func (a Agent) chainOf(r messages.ToolCallRequested) (*tools.ChainTool, string) {
	if r.Chain != "" || len(a.Chains) == 0 {
		return nil, ""
	}
	if ch := a.Chains[r.Tool]; ch != nil {
		return ch, r.Arguments
	}
	if r.Tool != ToolCallTool || !a.hasTool(ToolCallTool) {
		return nil, ""
	}
	nc, err := tools.ParseNamedCall(ToolCallTool, r.Arguments)
	if err != nil {
		return nil, "" // call_tool answers it with the error
	}
	if ch := a.Chains[nc.Name]; ch != nil {
		return ch, nc.Arguments
	}
	return nil, ""
}

// decideChains returns the next event of the first chain call of t that can go on:
// its next step's request, or its own result. Nil when every chain call waits on a
// step (or there is none). nowUS is the time of the decision (the session's clock,
// the recorded event's time in replay): a chain call's result records its latency
// from its first step's request to nowUS (0 when no step ran), as an effect's result
// records its call's. session is the session's ID, whose keys the steps get.
func decideChains(a *Agent, t *taskState, session string, nextSeq uint64, nowUS int64) *Decision {
	for _, c := range t.calls {
		if c.done || c.waitsForApproval() || !a.isChainCall(c.req) {
			continue
		}
		if d := decideChain(*a, c, session, t.rules, nextSeq, nowUS); d != nil {
			return d
		}
	}
	return nil
}

// decideChain decides c's next event under the rules of its task: the numbers of
// the JSON its templates read are rendered as written from rules 10
// (rulesExactNumbers) and tested for their values from rules 11
// (rulesNumbersAsValues), as float64s under older rules (chainNumbers); its
// arguments are read as the rules read them (chainArguments).
func decideChain(a Agent, c *callState, session string, rules int, nextSeq uint64, nowUS int64) *Decision {
	ch, rawArgs := a.chainOf(c.req)
	ch = ch.WithNumbers(chainNumbers(rules)).WithArguments(chainArguments(rules))
	answer := func(result, errMsg string) *Decision {
		latency := int64(0)
		if len(c.steps) > 0 {
			latency = max(nowUS-c.steps[0].ts, 0)
		}
		return &Decision{Payload: &messages.ToolCallCompleted{Key: c.req.Key, CallID: c.req.CallID, Tool: c.req.Tool, Result: result, Error: errMsg,
			LatencyUS: latency}, CausationID: c.eventID}
	}
	args, err := ch.ParseArguments(rawArgs)
	if err != nil {
		return answer("", err.Error())
	}
	steps := ch.Steps()
	outputs := make([]string, 0, len(steps))
	for i, st := range c.steps {
		if i >= len(steps) || st.req.ChainStep != steps[i].Name {
			// The chain's definition changed since these steps were recorded.
			return answer("", fmt.Sprintf("chain %s: its recorded step %d, %q, is not its step %d now: the chain was changed while it ran", ch.Spec().Name, i+1, st.req.ChainStep, i+1))
		}
		if !st.done {
			if !a.hasTool(st.req.Tool) {
				// Its tool left the catalog since the step was requested (a session
				// resumed without it): the step is answered here, as a call of a tool
				// the agent does not have is, and the chain ends on it.
				return &Decision{Payload: &messages.ToolCallCompleted{Key: st.req.Key, CallID: st.req.CallID, Tool: st.req.Tool,
					Error: fmt.Sprintf("unknown tool %q (it left the catalog)", st.req.Tool)}, CausationID: st.eventID}
			}
			return nil // it waits on this step
		}
		if st.result.Error != "" {
			return answer("", ch.StepError(i, st.result.Error))
		}
		outputs = append(outputs, st.result.Result)
	}
	if i := len(c.steps); i < len(steps) {
		raw, err := ch.StepArguments(i, args, outputs)
		if err != nil {
			return answer("", ch.StepError(i, err.Error()))
		}
		if !a.hasTool(steps[i].Tool) {
			return answer("", ch.StepError(i, fmt.Sprintf("unknown tool %q", steps[i].Tool)))
		}
		return &Decision{Payload: &messages.ToolCallRequested{Key: effectKey(session, nextSeq), CallID: c.req.CallID, Tool: steps[i].Tool,
			Arguments: raw, Step: c.req.Step, Chain: c.req.Key, ChainStep: steps[i].Name}, CausationID: c.eventID}
	}
	out, err := ch.Result(args, outputs)
	if err != nil {
		return answer("", err.Error())
	}
	return answer(out, "")
}

// chainNumbers returns how a chain reads the numbers of the JSON its templates
// parse (a step's result, fromjson's) under rules: as written and taken for their
// values (0 false, a null rendered empty) from rulesNumbersAsValues, as written
// from rulesExactNumbers (0 true, a null "<no value>"), as float64s before
// (98765432 rendered 9.8765432e+07).
func chainNumbers(rules int) tools.ChainNumbers {
	switch {
	case rules >= rulesNumbersAsValues:
		return tools.NumbersAsValues
	case rules >= rulesExactNumbers:
		return tools.NumbersAsWritten
	}
	return tools.NumbersAsFloats
}

// chainArguments returns how a chain reads its arguments under rules: an integer
// float64 does not hold as written refused, and values under a local $ref coerced
// as the schema it names says, from rulesExactArguments; under older rules such an
// integer rounded and no value under a $ref coerced. A null is read by its
// property's own type under every version (tools.ArgumentsExactNullsByType, not
// ArgumentsExact, which reads it by the property's whole schema): the chain calls
// recorded so are refolded and verified as they were decided.
func chainArguments(rules int) tools.ArgumentRules {
	if rules >= rulesExactArguments {
		return tools.ArgumentsExactNullsByType
	}
	return tools.ArgumentsRounded
}
