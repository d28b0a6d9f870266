package actors

import (
	"fmt"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/messages"
)

// longSession runs n tasks of BenchmarkSessionStateTask's shape in one session (the
// model calls the calculator, whose result is resultBytes long, then answers) and
// returns the session's state and its events, as the log holds them.
func longSession(tb testing.TB, as Agents, id string, n, resultBytes int) (*SessionState, []messages.Envelope) {
	return runLongSession(tb, as, id, longShape{tasks: n, resultBytes: resultBytes, steps: 1, calls: 1})
}

// longShape is the shape of runLongSession's tasks: each makes steps model calls
// that call calls tools each (the calculator), with results of resultBytes, then
// answers. check, when set, is called after each event.
type longShape struct {
	tasks, resultBytes, steps, calls int
	check                            func(*SessionState)
}

func runLongSession(tb testing.TB, as Agents, id string, sh longShape) (*SessionState, []messages.Envelope) {
	s := NewSessionState(id).WithAgents(as)
	var events []messages.Envelope
	now := int64(1_000_000)
	apply := func(p messages.Payload, cause, task string) messages.Envelope {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			tb.Fatal(err)
		}
		now++
		e.ID, e.SessionID, e.Seq, e.CausationID, e.CorrelationID, e.TS, e.Actor = s.keyAt(s.LastSeq+1), id, s.LastSeq+1, cause, task, now, "session"
		if _, ok := p.(*messages.ToolCallCompleted); ok {
			e.Actor = "tool"
		}
		if err := s.applyEncoded(e, p); err != nil {
			tb.Fatal(err)
		}
		events = append(events, e)
		if sh.check != nil {
			sh.check(s)
		}
		return e
	}
	filler := strings.Repeat("lorem ipsum dolor sit amet ", sh.resultBytes/27+1)[:sh.resultBytes]
	for k := range sh.tasks {
		task, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: fmt.Sprintf("Task %d: what is %d * (7 + 5)?", k, k)})
		if err != nil {
			tb.Fatal(err)
		}
		now++
		task.ID, task.SessionID, task.Seq, task.CorrelationID, task.TS = fmt.Sprintf("task-%s-%d", id, k), id, s.LastSeq+1, fmt.Sprintf("task-%s-%d", id, k), now
		task, p := stampRules(task, nil, s)
		if err := s.applyEncoded(task, p); err != nil {
			tb.Fatal(err)
		}
		events = append(events, task)
		var replies []messages.ChatMessage
		for st := range sh.steps {
			var calls []messages.ToolCall
			for c := range sh.calls {
				calls = append(calls, messages.ToolCall{ID: fmt.Sprintf("c%d-%d-%d", k, st, c), Name: "calculator", Arguments: fmt.Sprintf(`{"expression":"%d * (7 + %d)"}`, k, st*sh.calls+c)})
			}
			replies = append(replies, messages.ChatMessage{Role: messages.RoleAssistant, ToolCalls: calls})
		}
		replies = append(replies, messages.ChatMessage{Role: messages.RoleAssistant, Content: fmt.Sprint(k * 12)})
	steps:
		for step := 0; ; step++ {
			var last messages.Envelope
			for {
				d := s.DecideAmong(as, s.LastSeq+1, now)
				if d == nil {
					break
				}
				last = apply(d.Payload, d.CausationID, d.TaskID)
			}
			switch last.Type {
			case messages.TypeTaskCompleted:
				break steps
			case messages.TypeModelRequested:
				key := s.pendingModelText()
				apply(&messages.ModelResponded{Key: key, Model: "bench", Message: replies[min(step, len(replies)-1)]}, last.ID, task.ID)
			case messages.TypeToolCallRequested:
				for _, pc := range s.PendingCalls() {
					apply(&messages.ToolCallCompleted{Key: pc.Request.Key, CallID: pc.Request.CallID, Tool: pc.Request.Tool,
						Result: fmt.Sprint(pc.Request.CallID, " ", filler)}, pc.EventID, task.ID)
				}
			default:
				tb.Fatalf("decided %q", last.Type)
			}
		}
	}
	return s, events
}

// BenchmarkLongSessionRefold is what re-activating a passivated session costs the
// state, its log read aside: folding every event of its n tasks, then building the
// context of its next model call (which counts the tokens of the conversation's
// messages it has not counted). Compare the sizes: the cost per re-activation grows
// with the session's history.
//
//	go test ./actors -run '^$' -bench BenchmarkLongSessionRefold -benchmem
func BenchmarkLongSessionRefold(b *testing.B) {
	as := Agents{Default: benchStepAgent()}
	for _, n := range []int{100, 1000, 5000} {
		_, events := longSession(b, as, "long", n, 1024)
		b.Run(fmt.Sprintf("tasks=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s := NewSessionState("long").WithAgents(as)
				for _, e := range events {
					if err := s.Apply(e); err != nil {
						b.Fatal(err)
					}
				}
				a := as.Default
				s.loopContext(&a)
			}
			b.ReportMetric(float64(len(events)), "events/op")
		})
	}
}

// BenchmarkLongSessionStep builds the context of one model call of a live session
// of n tasks (the conversation's counts kept from earlier builds): a step's share
// that grows with the session's history.
//
//	go test ./actors -run '^$' -bench BenchmarkLongSessionStep -benchmem
func BenchmarkLongSessionStep(b *testing.B) {
	as := Agents{Default: benchStepAgent()}
	for _, n := range []int{100, 1000, 5000} {
		s, _ := longSession(b, as, "long", n, 1024)
		a := as.Default
		s.loopContext(&a)
		b.Run(fmt.Sprintf("tasks=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s.ctx.last.ok = false
				s.loopContext(&a)
			}
		})
	}
}

// BenchmarkLongSessionStepCompressed is BenchmarkLongSessionStep with the agent's
// conversation compression on (without a model for summaries: what it would
// summarise is cut), for each strategy that picks the turns.
//
//	go test ./actors -run '^$' -bench BenchmarkLongSessionStepCompressed -benchmem
func BenchmarkLongSessionStepCompressed(b *testing.B) {
	for _, strategy := range []string{"window", "summary", "hierarchical", "importance", "compact", "window+mask"} {
		ag := benchStepAgent()
		ag.Context.Compression = Compression{Strategy: strategy, Model: NoSummaryModel}
		as := Agents{Default: ag}
		for _, n := range []int{100, 1000} {
			s, _ := longSession(b, as, "long", n, 1024)
			a := as.Default
			s.loopContext(&a)
			b.Run(fmt.Sprintf("%s/tasks=%d", strategy, n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					s.ctx.last.ok = false
					s.loopContext(&a)
				}
			})
		}
	}
}

// BenchmarkLongSessionVerify is `replay verify` of a session of n tasks: every
// decision decided again from the events before it and compared.
//
//	go test ./actors -run '^$' -bench BenchmarkLongSessionVerify -benchmem
func BenchmarkLongSessionVerify(b *testing.B) {
	as := Agents{Default: benchStepAgent()}
	for _, n := range []int{100, 1000, 5000} {
		_, events := longSession(b, as, "long", n, 1024)
		b.Run(fmt.Sprintf("tasks=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if d, err := VerifyAmong(as, events); err != nil || d != nil {
					b.Fatalf("verify: %v %+v", err, d)
				}
			}
		})
	}
}

// BenchmarkLongSessionStepImportance is BenchmarkLongSessionStepCompressed's
// importance strategy from 100 to 5,000 tasks: what it sends is chosen from every
// older turn, so a step's cost must not grow with them (the turns' scores and
// counts are kept from earlier steps, their order kept as turns leave the window).
//
//	go test ./actors -run '^$' -bench BenchmarkLongSessionStepImportance -benchmem
func BenchmarkLongSessionStepImportance(b *testing.B) {
	ag := benchStepAgent()
	ag.Context.Compression = Compression{Strategy: "importance", Model: NoSummaryModel}
	as := Agents{Default: ag}
	for _, n := range []int{100, 1000, 5000} {
		s, _ := longSession(b, as, "long", n, 1024)
		a := as.Default
		s.loopContext(&a)
		b.Run(fmt.Sprintf("tasks=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s.ctx.last.ok = false
				s.loopContext(&a)
			}
		})
	}
}
