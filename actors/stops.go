package actors

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/troupe-run/troupe/internal/jsonesc"
	"github.com/troupe-run/troupe/internal/textclip"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// Stop conditions. Every paradigm's task ends with a final answer or with one of
// these, each a TaskFailed with its reason, the steps taken and the tokens used:
//
//   - max steps (messages.ReasonMaxSteps): the task made its MaxSteps model calls
//     without a final answer;
//   - token budget (messages.ReasonTokenBudget): its model calls used its budget of
//     prompt and completion tokens (MaxTokens);
//   - an unfinished final answer (rules 4 on, unwholeAnswer): cut at the model's
//     output token limit (messages.ReasonOutputTruncated), or stopped by the
//     provider's content filter (messages.ReasonContentFilter); from rules 5,
//     stopped for any other reason a provider gives that is not a whole answer's
//     (messages.ReasonAnswerUnfinished); from rules 9, an empty one, no text and
//     no tool calls (messages.ReasonEmptyAnswer);
//   - cost budget (messages.ReasonCostBudget): its model calls cost its budget in US
//     dollars (MaxCostUSD), as the gateway's prices say;
//   - deadline (messages.ReasonDeadline) and cancellation (messages.ReasonCancelled);
//   - loop detected (messages.ReasonLoop): the model requested the same tool call
//     LoopRepeats times, or LoopStaleSteps steps in a row brought no new information.
//
// Each is judged in Decide from the folded state alone: the fold keeps, per task, a
// hash of each tool call requested with how often it was, and a hash of each tool
// result seen (loopState), so a refold or a replay stops where the live run did.

// Defaults of Agent's loop detection.
const (
	// DefaultLoopRepeats is how many times a task may request the same call before it
	// stops: the third identical request stops it.
	DefaultLoopRepeats = 3
	// DefaultLoopStaleSteps is how many steps in a row may bring no new information
	// before a task stops.
	DefaultLoopStaleSteps = 4
	// LoopOff, as Agent.LoopRepeats or Agent.LoopStaleSteps, turns that check off.
	LoopOff = -1
)

// tokenBudget is the budget of the task's tokens: its own, else the agent's (0: none).
func (a Agent) tokenBudget(t *taskState) int {
	if t.Spec.MaxTokens > 0 {
		return t.Spec.MaxTokens
	}
	return max(a.MaxTokens, 0)
}

func (a Agent) loopRepeats() int { return loopSetting(a.LoopRepeats, DefaultLoopRepeats) }

func (a Agent) loopStaleSteps() int { return loopSetting(a.LoopStaleSteps, DefaultLoopStaleSteps) }

// loopSetting reads a loop-detection setting: negative turns the check off (0),
// zero is the default def.
func loopSetting(v, def int) int {
	switch {
	case v < 0:
		return 0
	case v == 0:
		return def
	}
	return v
}

// costBudget is the task's cost budget in US dollars: its own, else the agent's (0:
// none).
func (a Agent) costBudget(t *taskState) float64 {
	if t.Spec.MaxCostUSD > 0 {
		return t.Spec.MaxCostUSD
	}
	return max(a.MaxCostUSD, 0)
}

// overBudget returns the TaskFailed of a task whose tokens reached its token budget,
// or whose cost reached its cost budget, or nil. Its sub-agents' tokens and cost
// (taskState.SubUsage) count too.
func (a *Agent) overBudget(t *taskState) *messages.TaskFailed {
	if f := a.overTokens(t); f != nil {
		return f
	}
	return a.overCost(t)
}

// overCost returns the TaskFailed of a task whose cost reached its cost budget, or nil.
func (a Agent) overCost(t *taskState) *messages.TaskFailed {
	budget := a.costBudget(t)
	own, sub := t.Usage.CostUSD, t.SubUsage().CostUSD
	if budget == 0 || !costReached(own+sub, budget, t.rules) {
		return nil
	}
	msg := fmt.Sprintf("stopped: the task cost $%.4f without a final answer; its budget is $%.4f", own+sub, budget)
	if sub != 0 {
		msg = fmt.Sprintf("stopped: the task cost $%.4f ($%.4f of its own, $%.4f by its sub-agents) without a final answer; its budget is $%.4f",
			own+sub, own, sub, budget)
	}
	return &messages.TaskFailed{Reason: messages.ReasonCostBudget, Error: msg, Steps: t.Steps, Usage: t.Usage}
}

// costTolerance is the share of a cost budget that the float64 sum of a task's
// costs may fall short of it by and still reach it (rulesCostTolerance): ten calls
// of $0.10 add up to 0.9999999999999999, 10,000 of $0.0001 to 0.9999999999999062,
// a billionth of the budget covers both with room to spare, and no price is that
// fine.
const costTolerance = 1e-9

// costReached says whether spent reaches budget under the task's rules: from
// rules 10 (rulesCostTolerance) within costTolerance of it, before exactly.
func costReached(spent, budget float64, rules int) bool {
	if rules >= rulesCostTolerance {
		return spent >= budget*(1-costTolerance)
	}
	return spent >= budget
}

// overTokens returns the TaskFailed of a task whose tokens reached its token budget, or nil.
func (a Agent) overTokens(t *taskState) *messages.TaskFailed {
	budget := a.tokenBudget(t)
	used := t.Usage.Tokens() + t.SubUsage().Tokens()
	if budget == 0 || used < budget {
		return nil
	}
	var msg string
	if sub := t.SubUsage().Tokens(); sub == 0 {
		msg = fmt.Sprintf("stopped: the task used %d tokens (%d prompt + %d completion) without a final answer; its budget is %d",
			used, t.Usage.PromptTokens, t.Usage.CompletionTokens, budget)
	} else {
		msg = fmt.Sprintf("stopped: the task used %d tokens (%d prompt + %d completion of its own, %d by its sub-agents) without a final answer; its budget is %d",
			used, t.Usage.PromptTokens, t.Usage.CompletionTokens, sub, budget)
	}
	return &messages.TaskFailed{Reason: messages.ReasonTokenBudget, Error: msg, Steps: t.Steps, Usage: t.Usage}
}

// repeatedCall returns the TaskFailed of a task whose latest reply requests a call
// the task requested LoopRepeats times in all, or nil.
func (a *Agent) repeatedCall(t *taskState) *messages.TaskFailed {
	limit := a.loopRepeats()
	calls := t.reply.Message.ToolCalls
	if limit == 0 || t.loop.replyMax < limit || t.loop.replyArgmax >= len(calls) {
		return nil
	}
	c := calls[t.loop.replyArgmax]
	return &messages.TaskFailed{Reason: messages.ReasonLoop,
		Error: fmt.Sprintf("stopped: the same call %s(%s) was requested %d times", c.Name, textclip.Head(c.Arguments, 200), t.loop.replyMax),
		Steps: t.Steps, Usage: t.Usage}
}

// staleSteps returns the TaskFailed of a task whose latest LoopStaleSteps steps
// brought no new information, or nil.
func (a *Agent) staleSteps(t *taskState) *messages.TaskFailed {
	limit := a.loopStaleSteps()
	if limit == 0 || t.loop.stale < limit {
		return nil
	}
	return &messages.TaskFailed{Reason: messages.ReasonLoop,
		Error: fmt.Sprintf("stopped: %d steps in a row brought no new information (each of their tool results had been seen before in the task)", t.loop.stale),
		Steps: t.Steps, Usage: t.Usage}
}

// loopState is what a task's fold keeps for loop detection: hashes, not texts, in
// slices searched linearly (a task has at most a few hundred calls). The slices
// start in the state's own arrays, so a task of a few calls allocates nothing for
// them: a loopState lives in its taskState, which is never copied.
type loopState struct {
	// calls counts the requests of each distinct call (callHash) of the task.
	calls []callCount
	// results are the hashes of the tool results the task has seen (resultHash).
	results []uint64
	// replyMax is the highest count, among the calls of the latest reply, and
	// replyArgmax the index of the first call that has it.
	replyMax, replyArgmax int
	// stale counts the latest steps in a row whose tool results all had been seen.
	stale int
	// callBuf and resultBuf hold the first calls and results.
	callBuf   [4]callCount
	resultBuf [4]uint64
}

type callCount struct {
	hash uint64
	n    int
}

// noteReply counts the tool calls of a model's reply.
func (l *loopState) noteReply(calls []messages.ToolCall) {
	l.replyMax, l.replyArgmax = 0, 0
	if l.calls == nil {
		l.calls = l.callBuf[:0]
	}
	for i, c := range calls {
		h := callHash(c.Name, c.Arguments)
		n := 0
		for j := range l.calls {
			if l.calls[j].hash == h {
				l.calls[j].n++
				n = l.calls[j].n
				break
			}
		}
		if n == 0 {
			l.calls = append(l.calls, callCount{hash: h, n: 1})
			n = 1
		}
		if n > l.replyMax {
			l.replyMax, l.replyArgmax = n, i
		}
	}
}

// noteStep records the results of a step whose calls all completed: the step is
// stale when each of its results had been seen before (the same tool with the same
// result or error), earlier in the task or earlier in the step.
func (l *loopState) noteStep(calls []*callState) {
	stale := len(calls) > 0
	if l.results == nil {
		l.results = l.resultBuf[:0]
	}
	for _, c := range calls {
		h := resultHash(c.result)
		seen := false
		for _, r := range l.results {
			if r == h {
				seen = true
				break
			}
		}
		if !seen {
			l.results = append(l.results, h)
			stale = false
		}
	}
	if stale {
		l.stale++
	} else {
		l.stale = 0
	}
}

// Hashing. FNV-1a over bytes, combined with a SplitMix64 finaliser, allocation-free.

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

func fnvByte(h uint64, b byte) uint64 {
	h ^= uint64(b)
	return h * fnvPrime
}

// mix combines two hashes, in order.
func mix(a, b uint64) uint64 {
	z := a ^ (b + 0x9e3779b97f4a7c15 + a<<6 + a>>2)
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// callHash is the hash of a tool call: its tool, and its arguments as a JSON value
// when they are one (whitespace, the order of an object's keys, string escapes and
// the spelling of a number do not count: {"b": 1, "a": 1.0} is {"a":1,"b":1}), as
// bytes otherwise.
func callHash(tool, args string) uint64 {
	h := fnvByte(fnvString(fnvOffset, tool), 0)
	if v, end, ok := jsonHash(args, skipSpace(args, 0), 0); ok && skipSpace(args, end) == len(args) {
		return mix(h, v)
	}
	return mix(fnvByte(h, 1), fnvString(fnvOffset, args))
}

// resultHash is the hash of a tool's answer: its tool, and its result or error.
func resultHash(r messages.ToolCallCompleted) uint64 {
	h := fnvByte(fnvString(fnvOffset, r.Tool), 0)
	if r.Error != "" {
		return fnvString(fnvByte(h, 'e'), r.Error)
	}
	return fnvString(fnvByte(h, 'r'), r.Result)
}

// maxJSONDepth bounds the nesting jsonHash follows; deeper arguments hash as bytes.
const maxJSONDepth = 64

func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// jsonHash hashes the JSON value at s[i:] (no leading space) and returns where it
// ends; ok is false when s holds no valid value there.
func jsonHash(s string, i, depth int) (h uint64, end int, ok bool) {
	if i >= len(s) || depth > maxJSONDepth {
		return 0, i, false
	}
	switch c := s[i]; {
	case c == '{':
		var sum uint64 // members in any order hash alike
		i = skipSpace(s, i+1)
		if i < len(s) && s[i] == '}' {
			return mix('{', 0), i + 1, true
		}
		for {
			if i >= len(s) || s[i] != '"' {
				return 0, i, false
			}
			k, next, ok := stringHash(s, i)
			if !ok {
				return 0, i, false
			}
			i = skipSpace(s, next)
			if i >= len(s) || s[i] != ':' {
				return 0, i, false
			}
			v, next, ok := jsonHash(s, skipSpace(s, i+1), depth+1)
			if !ok {
				return 0, i, false
			}
			sum += mix(k, v)
			i = skipSpace(s, next)
			if i < len(s) && s[i] == ',' {
				i = skipSpace(s, i+1)
				continue
			}
			if i < len(s) && s[i] == '}' {
				return mix('{', sum), i + 1, true
			}
			return 0, i, false
		}
	case c == '[':
		h = mix('[', 0)
		i = skipSpace(s, i+1)
		if i < len(s) && s[i] == ']' {
			return h, i + 1, true
		}
		for {
			v, next, ok := jsonHash(s, i, depth+1)
			if !ok {
				return 0, i, false
			}
			h = mix(h, v)
			i = skipSpace(s, next)
			if i < len(s) && s[i] == ',' {
				i = skipSpace(s, i+1)
				continue
			}
			if i < len(s) && s[i] == ']' {
				return h, i + 1, true
			}
			return 0, i, false
		}
	case c == '"':
		return stringHash(s, i)
	case c == 't' && len(s) >= i+4 && s[i:i+4] == "true":
		return mix('t', 0), i + 4, true
	case c == 'f' && len(s) >= i+5 && s[i:i+5] == "false":
		return mix('f', 0), i + 5, true
	case c == 'n' && len(s) >= i+4 && s[i:i+4] == "null":
		return mix('n', 0), i + 4, true
	case c == '-' || '0' <= c && c <= '9':
		j := i
		for j < len(s) && (s[j] == '-' || s[j] == '+' || s[j] == '.' || s[j] == 'e' || s[j] == 'E' || '0' <= s[j] && s[j] <= '9') {
			j++
		}
		f, err := strconv.ParseFloat(s[i:j], 64)
		if err != nil || math.IsInf(f, 0) {
			return 0, i, false
		}
		if f == 0 {
			f = 0 // -0 is 0
		}
		return mix('0', math.Float64bits(f)), j, true
	}
	return 0, i, false
}

// stringHash hashes the JSON string at s[i:] (s[i] is '"') by its decoded text.
func stringHash(s string, i int) (uint64, int, bool) {
	h := uint64(fnvOffset)
	var buf [utf8.UTFMax]byte
	for i++; i < len(s); {
		c := s[i]
		switch {
		case c == '"':
			return mix('"', h), i + 1, true
		case c < 0x20:
			return 0, i, false
		case c != '\\':
			h = fnvByte(h, c)
			i++
			continue
		}
		if i+1 >= len(s) {
			return 0, i, false
		}
		switch e := s[i+1]; e {
		case '"', '\\', '/':
			h, i = fnvByte(h, e), i+2
		case 'b':
			h, i = fnvByte(h, '\b'), i+2
		case 'f':
			h, i = fnvByte(h, '\f'), i+2
		case 'n':
			h, i = fnvByte(h, '\n'), i+2
		case 'r':
			h, i = fnvByte(h, '\r'), i+2
		case 't':
			h, i = fnvByte(h, '\t'), i+2
		case 'u':
			r, ok := jsonesc.Hex4(s[i+2:])
			if !ok {
				return 0, i, false
			}
			i += 6
			if 0xd800 <= r && r < 0xdc00 && i+1 < len(s) && s[i] == '\\' && s[i+1] == 'u' {
				if lo, ok := jsonesc.Hex4(s[i+2:]); ok && 0xdc00 <= lo && lo < 0xe000 {
					r, i = (r-0xd800)<<10+(lo-0xdc00)+0x10000, i+6
				}
			}
			for _, b := range utf8.AppendRune(buf[:0], r) {
				h = fnvByte(h, b)
			}
		default:
			return 0, i, false
		}
	}
	return 0, i, false
}

// unwholeAnswer returns the failure of a task whose latest model reply, its final
// answer, is not whole (rules 4 on): cut at the output token limit, or stopped
// by the provider's content filter; from rules 5, stopped for any reason that
// is not a whole answer's; from rules 9, empty (no text, no tool calls). nil for
// a whole answer, and under older rules.
func unwholeAnswer(t *taskState) *messages.TaskFailed {
	if t.rules < rulesWhole {
		return nil
	}
	f := unwholeFailure(t.rules, t.reply)
	if f == nil && t.rules >= rulesEmptyAnswer && len(t.reply.Message.ToolCalls) == 0 && strings.TrimSpace(t.reply.Message.Content) == "" {
		f = &messages.TaskFailed{Reason: messages.ReasonEmptyAnswer, Error: emptyAnswerError(t.reply.Message.Content)}
	}
	if f != nil {
		f.Steps, f.Usage = t.Steps, t.Usage
	}
	return f
}

// emptyAnswerError is the error of a task whose final answer is content, nothing
// but white space (messages.ReasonEmptyAnswer).
func emptyAnswerError(content string) string {
	return fmt.Sprintf("the model's final answer is empty: no text and no tool calls (%d characters of white space); "+
		"the task has no answer (the reply is in the session's model.responded event)", utf8.RuneCountInString(content))
}

// unwholeFailure returns the failure, without its steps and usage, that a final
// answer r the model did not finish ends its task with under rules (4 on); nil
// for a whole one. Under 4 only "length" and "content_filter" fail it, and any
// other recorded reason (Gemini's "safety", "recitation", …) completes the task
// with the text; from 5 every recorded reason does (the gateway records none for
// a whole answer: llm.AbnormalFinish): a provider's word for its content filter
// (filterFinish) as content_filter, any other as answer_unfinished.
func unwholeFailure(rules int, r *messages.ModelResponded) *messages.TaskFailed {
	switch {
	case r.FinishReason == "":
		return nil
	case r.FinishReason == llm.FinishLength:
		return &messages.TaskFailed{Reason: messages.ReasonOutputTruncated,
			Error: fmt.Sprintf("the model's answer reached its output token limit and was cut after %d characters (finish_reason %q); "+
				"raise the model's output limit or ask for a shorter answer (the cut answer is in the session's model.responded event)",
				utf8.RuneCountInString(r.Message.Content), r.FinishReason)}
	case r.FinishReason == llm.FinishContentFilter || rules >= rulesAnyFinish && filterFinish(r.FinishReason):
		msg := fmt.Sprintf("the provider's content filter stopped the model's answer (finish_reason %q)", r.FinishReason)
		if r.Message.Content != "" { // what the provider let through, or its refusal
			msg += ": " + textclip.Head(r.Message.Content, 200)
		}
		return &messages.TaskFailed{Reason: messages.ReasonContentFilter, Error: msg}
	case rules >= rulesAnyFinish:
		msg := fmt.Sprintf("the provider ended the model's answer before it was finished (finish_reason %q)", r.FinishReason)
		if r.Message.Content != "" {
			msg += ": " + textclip.Head(r.Message.Content, 200)
		}
		return &messages.TaskFailed{Reason: messages.ReasonAnswerUnfinished, Error: msg}
	}
	return nil
}

// overWindow returns the failure of a task whose next model request, as its
// context report counts it, is larger than the model's context window (rules 9
// on): its stable prefix (the system prompt and the tools' schemas, grown by a
// group of tools loaded mid-task) or the items that are never dropped (the latest
// tool call, whose arguments a cut never shortens) outgrow it, so that a provider
// would refuse the request, or the model would answer without having read the
// task cut to its marker. nil when it fits, the window is unknown, and under
// older rules, which sent it.
func overWindow(rules int, t *taskState, r *messages.ContextReport) *messages.TaskFailed {
	if rules < rulesOverWindow || r == nil || r.Window <= 0 || r.System+r.Used <= r.Window {
		return nil
	}
	kept := slices.Clone(r.Kept)
	slices.SortStableFunc(kept, func(a, b messages.ContextItem) int { return cmp.Compare(b.Tokens, a.Tokens) })
	var largest []string
	for _, it := range kept[:min(3, len(kept))] {
		largest = append(largest, fmt.Sprintf("%s %d", textclip.Head(it.ID, 80), it.Tokens))
	}
	msg := fmt.Sprintf("the next model request does not fit the model's context window: %d tokens, of which %d are the system prompt and the tools' schemas, in a window of %d",
		r.System+r.Used, r.System, r.Window)
	if len(largest) > 0 {
		msg += "; the largest items sent (tokens): " + strings.Join(largest, ", ")
	}
	msg += `; raise the agent's "context": {"window"} if the model has more, or give it fewer tools, or ask for shorter tool arguments`
	return &messages.TaskFailed{Reason: messages.ReasonContextOverflow, Error: msg, Steps: t.Steps, Usage: t.Usage}
}

// filterFinish reports whether a finish reason is a provider's word for its
// content filter stopping or withholding an answer (rules 5 on): Gemini's
// (safety, recitation, blocklist, prohibited_content, spii, image_safety),
// Anthropic's refusal, Bedrock's guardrail_intervened and content_filtered, in
// any case.
func filterFinish(reason string) bool {
	switch strings.ToLower(reason) {
	case llm.FinishContentFilter, "safety", "recitation", "blocklist", "prohibited_content", "spii", "image_safety",
		"refusal", "guardrail_intervened", "content_filtered":
		return true
	}
	return false
}

// unwholeWork returns why an intermediate answer r (a plan, a verdict, a routing
// decision, a lesson) is not taken, as a paradigm says of one it cannot read, when
// the model did not finish it (rules 4 on): its JSON may be whole while what
// followed it was cut, or the provider withheld part of it. "" for a whole answer,
// and under older rules, which read it as if whole.
func unwholeWork(rules int, r *messages.ModelResponded) string {
	if rules < rulesWhole || r.FinishReason == "" {
		return ""
	}
	if r.FinishReason == llm.FinishLength {
		return fmt.Sprintf("the answer was cut at the output token limit after %d characters (finish_reason %q)",
			utf8.RuneCountInString(r.Message.Content), r.FinishReason)
	}
	return fmt.Sprintf("the answer was not finished (finish_reason %q)", r.FinishReason)
}
