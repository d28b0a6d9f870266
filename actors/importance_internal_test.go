package actors

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	pctx "github.com/troupe-run/troupe/pipelines/context"
)

// importantPartsReference is importantParts as it was before its weights and
// ranks were kept from step to step: every older turn scored, counted and sorted
// on every call. importantParts must send what it sends.
func (s *SessionState) importantPartsReference(c Compression) []sentPart {
	turns := pctx.SplitTurns(s.history)
	keep := make([]bool, len(turns))
	budget := c.history()
	task := -1
	if s.active != nil {
		task = sort.Search(len(turns), func(i int) bool { return turns[i].Start >= s.active.start })
	}
	recent := max(len(turns)-c.window(), 0)
	for i := range turns {
		if i >= recent || i == task {
			keep[i] = true
			budget -= llm.EstimateTokens(s.history[turns[i].Start:turns[i].End])
		}
	}
	order := make([]int, 0, recent)
	for i := range recent {
		if i != task {
			order = append(order, i)
		}
	}
	score := func(i int) int { return pctx.TurnImportance(s.history[turns[i].Start:turns[i].End]) }
	scores := make(map[int]int, len(order))
	for _, i := range order {
		scores[i] = score(i)
	}
	sort.SliceStable(order, func(x, y int) bool {
		if scores[order[x]] != scores[order[y]] {
			return scores[order[x]] > scores[order[y]]
		}
		return order[x] > order[y]
	})
	for _, i := range order {
		n := llm.EstimateTokens(s.history[turns[i].Start:turns[i].End])
		if n > budget {
			continue
		}
		keep[i], budget = true, budget-n
	}
	dropped := 0
	for _, k := range keep {
		if !k {
			dropped++
		}
	}
	out := make([]sentPart, 0, len(s.history)+1)
	if dropped > 0 {
		out = append(out, sentPart{index: -1, id: fmt.Sprintf("summary/dropped-%d", dropped), msg: messages.ChatMessage{Role: messages.RoleUser,
			Content: fmt.Sprintf("[%d less important earlier turns of this conversation are not shown]", dropped)}})
	}
	answered := len(s.history)
	for i := len(s.history) - 1; i >= 0; i-- {
		if s.history[i].Role == messages.RoleAssistant {
			answered = i
			break
		}
	}
	for i, tr := range turns {
		if keep[i] {
			for j := tr.Start; j < tr.End; j++ {
				out = append(out, sentPart{index: j, msg: s.sentMessage(c, j, j < answered)})
			}
		}
	}
	return out
}

// importanceTask is one task of an importance session: its input, then the
// model's replies (tool calls, then an answer) and the calculator's result of
// each call ("error: " and the rest for a failure).
type importanceTask struct {
	input   string
	replies []messages.ChatMessage
	result  func(callID string) string
}

// runImportanceSession folds the tasks' events into a session of agent a, as the
// session actor would decide them, calling check after every event; it returns
// the events.
func runImportanceSession(t *testing.T, a Agent, tasks []importanceTask, check func(*SessionState)) (*SessionState, []messages.Envelope) {
	t.Helper()
	as := Agents{Default: a}
	s := NewSessionState("imp").WithAgents(as)
	var events []messages.Envelope
	now := int64(1_000_000)
	apply := func(e messages.Envelope, p messages.Payload) messages.Envelope {
		t.Helper()
		if err := s.applyEncoded(e, p); err != nil {
			t.Fatal(err)
		}
		events = append(events, e)
		check(s)
		return e
	}
	event := func(p messages.Payload, cause, task string) messages.Envelope {
		t.Helper()
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		now++
		e.ID, e.SessionID, e.Seq, e.CausationID, e.CorrelationID, e.TS, e.Actor = s.keyAt(s.LastSeq+1), "imp", s.LastSeq+1, cause, task, now, "session"
		if _, ok := p.(*messages.ToolCallCompleted); ok {
			e.Actor = "tool"
		}
		return apply(e, p)
	}
	for k, tk := range tasks {
		task, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: tk.input})
		if err != nil {
			t.Fatal(err)
		}
		now++
		id := fmt.Sprintf("task-%d", k)
		task.ID, task.SessionID, task.Seq, task.CorrelationID, task.TS = id, "imp", s.LastSeq+1, id, now
		task, p := stampRules(task, nil, s)
		apply(task, p)
	steps:
		for step := 0; ; step++ {
			var last messages.Envelope
			for {
				d := s.DecideAmong(as, s.LastSeq+1, now)
				if d == nil {
					break
				}
				last = event(d.Payload, d.CausationID, d.TaskID)
			}
			switch last.Type {
			case messages.TypeTaskCompleted, messages.TypeTaskFailed:
				break steps
			case messages.TypeModelRequested:
				event(&messages.ModelResponded{Key: s.pendingModelText(), Model: "bench", Message: tk.replies[min(step, len(tk.replies)-1)]}, last.ID, id)
			case messages.TypeToolCallRequested:
				for _, pc := range s.PendingCalls() { // one by one: the latest turn grows
					r := messages.ToolCallCompleted{Key: pc.Request.Key, CallID: pc.Request.CallID, Tool: pc.Request.Tool, Result: tk.result(pc.Request.CallID)}
					if e, ok := strings.CutPrefix(r.Result, "error: "); ok {
						r.Result, r.Error = "", e
					}
					event(&r, pc.EventID, id)
				}
			default:
				t.Fatalf("decided %q", last.Type)
			}
		}
	}
	return s, events
}

// importanceShapes are sessions of every kind of turn importance weighs: the
// user's requests and chit-chat, tool calls that succeed and fail (several at a
// time, their results folded one by one), answers that decide, answer at length or
// barely, and tasks of many steps, whose input leaves a small window before they
// end.
func importanceShapes(n int) map[string][]importanceTask {
	calls := func(k, step, n int) messages.ChatMessage {
		m := messages.ChatMessage{Role: messages.RoleAssistant}
		for c := range n {
			m.ToolCalls = append(m.ToolCalls, messages.ToolCall{ID: fmt.Sprintf("c%d-%d-%d", k, step, c), Name: "calculator", Arguments: fmt.Sprintf(`{"expression":"%d * %d"}`, k, c)})
		}
		return m
	}
	answer := func(s string) messages.ChatMessage {
		return messages.ChatMessage{Role: messages.RoleAssistant, Content: s}
	}
	filler := strings.Repeat("lorem ipsum dolor sit amet ", 40)
	chat := []string{"hello", "thanks!", "ok", "great, thank you", "bye"}
	shapes := map[string][]importanceTask{}
	var mixed, chitChat, long []importanceTask
	for k := range n {
		tk := importanceTask{input: fmt.Sprintf("Task %d: what is %d * (7 + 5)? %s", k, k, strings.Repeat("Be precise. ", k%5))}
		switch k % 6 {
		case 0: // a tool call, then a short answer
			tk.replies = []messages.ChatMessage{calls(k, 0, 1), answer(fmt.Sprint(k * 12))}
			tk.result = func(id string) string { return id + " " + filler[:k%7*40] }
		case 1: // a failing call among three, then a decision
			tk.replies = []messages.ChatMessage{calls(k, 0, 3), answer("I decided to use the second result.")}
			tk.result = func(id string) string {
				if strings.HasSuffix(id, "-1") {
					return "error: division by zero"
				}
				return id + " 42"
			}
		case 2: // chit-chat, answered in chit-chat
			tk.input = chat[k%len(chat)]
			tk.replies = []messages.ChatMessage{answer("ok")}
		case 3: // an answer of several lines
			tk.replies = []messages.ChatMessage{answer("First line.\nSecond line.\n" + filler[:k%3*100])}
		case 4: // many steps: the task's input leaves a small window
			tk.replies = []messages.ChatMessage{calls(k, 0, 1), calls(k, 1, 2), calls(k, 2, 1), calls(k, 3, 1), answer("done")}
			tk.result = func(id string) string { return id + " " + filler[:len(id)*5] }
		case 5: // a large result the mask changes
			tk.replies = []messages.ChatMessage{calls(k, 0, 1), answer("the plan is to stop")}
			tk.result = func(id string) string { return filler + filler }
		}
		mixed = append(mixed, tk)
		chitChat = append(chitChat, importanceTask{input: chat[k%len(chat)], replies: []messages.ChatMessage{answer("sure")}})
		if k < n/4 {
			long = append(long, importanceTask{input: fmt.Sprintf("Long task %d", k), replies: []messages.ChatMessage{
				calls(k, 0, 2), calls(k, 1, 1), calls(k, 2, 3), calls(k, 3, 1), calls(k, 4, 1), calls(k, 5, 2), answer("therefore 7")},
				result: func(id string) string {
					if strings.HasSuffix(id, "-2") {
						return "error: timeout"
					}
					return id + " " + filler[:len(id)*3]
				}})
		}
	}
	shapes["mixed"], shapes["chitchat"], shapes["long"] = mixed, chitChat, long
	return shapes
}

// importanceConfigs are the filters checked: windows of 0 (the default, 8), 1,
// 2 and more turns than any session has; budgets of 1 token, a few turns', the
// default and unbounded; with and without masking large results.
func importanceConfigs() []Compression {
	var cs []Compression
	for _, strategy := range []string{pctx.CompressImportance, pctx.CompressImportance + "+" + pctx.CompressMask} {
		for _, w := range []int{0, 1, 2, 1000} {
			for _, h := range []int{1, 60, 0, 1 << 40} {
				cs = append(cs, Compression{Strategy: strategy, Window: w, HistoryTokens: h, ObservationTokens: 50, Model: NoSummaryModel})
			}
		}
	}
	return cs
}

func checkImportantParts(t *testing.T, s *SessionState, c Compression) {
	t.Helper()
	got, want := s.importantParts(c), s.importantPartsReference(c)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("after seq %d (window %d, history tokens %d): importantParts sent %d parts %v, the reference %d %v",
			s.LastSeq, c.Window, c.HistoryTokens, len(got), partIndexes(got), len(want), partIndexes(want))
	}
}

func partIndexes(ps []sentPart) []int {
	out := make([]int, len(ps))
	for i, p := range ps {
		out[i] = p.index
	}
	return out
}

// Importance filtering keeps its turns' weights and ranks from step to step; what
// it sends after every event of every shape, for every window and budget, is what
// scoring, counting and sorting every older turn again sends: whether one filter
// asks after each event (as a session's agent does), or all of them in turn on
// one state (agents of different windows in one session), or a state refolded
// from the events (a restart, a replay) does.
func TestImportantPartsMatchTheReference(t *testing.T) {
	agent := benchStepAgent()
	agent.Context.Compression = Compression{Strategy: pctx.CompressImportance, Window: 2, HistoryTokens: 200, Model: NoSummaryModel}
	configs := importanceConfigs()
	for name, tasks := range importanceShapes(30) {
		t.Run(name, func(t *testing.T) {
			// What the shapes must have shown: a task's input before a window of one
			// turn, kept; turns left out, and older turns kept past some that did not fit.
			var taskBefore, dropped, skipped bool
			_, events := runImportanceSession(t, agent, tasks, func(s *SessionState) {
				for _, c := range configs {
					checkImportantParts(t, s, c)
				}
				turns := s.historyTurns()
				parts := s.importantParts(Compression{Window: 1, HistoryTokens: 60})
				if s.active != nil && s.turnAt(s.active.start) < len(turns)-1 && parts[len(parts)-1].index >= 0 {
					taskBefore = taskBefore || slices.ContainsFunc(parts, func(p sentPart) bool { return p.index == s.active.start })
				}
				if parts[0].index < 0 {
					dropped = true
					kept := map[int]bool{}
					for _, p := range parts[1:] {
						kept[s.turnAt(p.index+1)-1] = true
					}
					task := -1
					if s.active != nil {
						task = s.turnAt(s.active.start)
					}
					for i, older := 0, false; i < len(turns)-1; i++ {
						skipped = skipped || older && !kept[i]
						older = older || kept[i] && i != task
					}
				}
			})
			if name != "chitchat" && !(taskBefore && dropped && skipped) {
				t.Fatalf("shape %s: a task's input kept before the window %v, turns left out %v, kept past one left out %v; want all", name, taskBefore, dropped, skipped)
			}
			for _, c := range configs {
				runImportanceSession(t, agent, tasks, func(s *SessionState) { checkImportantParts(t, s, c) })
				s := NewSessionState("imp").WithAgents(Agents{Default: agent})
				for _, e := range events {
					if err := s.Apply(e); err != nil {
						t.Fatal(err)
					}
				}
				checkImportantParts(t, s, c)
			}
		})
	}
}

// The walk jumps to the newest ranked value within a budget.
func TestMinTreeLastAtMost(t *testing.T) {
	var tr minTree
	var vs []int
	for i := range 100 {
		v := (i*37 + 11) % 53
		vs = append(vs, v)
		tr.push(v)
		for p := -1; p <= len(vs); p++ {
			for _, bound := range []int{-1, 0, 5, 26, 52, 100} {
				want := -1
				for k := min(p, len(vs)-1); k >= 0; k-- {
					if vs[k] <= bound {
						want = k
						break
					}
				}
				if got := tr.lastAtMost(p, bound); got != want {
					t.Fatalf("%v: lastAtMost(%d, %d) = %d, want %d", vs, p, bound, got, want)
				}
			}
		}
	}
}
