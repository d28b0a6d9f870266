package actors

import (
	"fmt"
	"reflect"
	"runtime"
	"testing"
)

// A long session's context leaves the messages older than the history window out of
// the candidates (olderTurns): after every event of sessions of several shapes, the
// context built so is the one built with every message a candidate, its report too
// (Older counting them).
func TestOlderTurnsLeaveTheContextAsItWas(t *testing.T) {
	for _, c := range []struct {
		turns               int
		steps, calls, tasks int
		window              int
	}{
		{turns: 12, steps: 2, calls: 2, tasks: 30, window: 420},
		{turns: 0, steps: 1, calls: 1, tasks: 40},
		{turns: 1, steps: 2, calls: 3, tasks: 30},
		{turns: 5, steps: 3, calls: 2, tasks: 30},
		{turns: 7, steps: 12, calls: 1, tasks: 6},
		{turns: 4, steps: 0, calls: 0, tasks: 40},
	} {
		t.Run(fmt.Sprintf("turns=%d,steps=%d,calls=%d", c.turns, c.steps, c.calls), func(t *testing.T) {
			ag := benchStepAgent()
			ag.MaxSteps = c.steps + 1
			ag.Context.HistoryTurns = c.turns
			if c.window > 0 {
				ag.Context.Window, ag.Context.ReservedOutput = c.window, 100
			}
			as := Agents{Default: ag}
			cut, checks, dropped := 0, 0, 0
			check := func(s *SessionState) {
				a := as.Default
				s.ctx.last.ok = false
				msgs, _, rep := s.buildLoopContext(&a, true)
				s.ctx.last.ok = false
				all, _, want := s.buildLoopContext(&a, false)
				s.ctx.last.ok = false
				if !reflect.DeepEqual(msgs, all) || !reflect.DeepEqual(rep, want) {
					t.Fatalf("after seq %d: the context without the older turns differs:\n%+v\n%+v\nreport %+v\nwant   %+v", s.LastSeq, msgs, all, rep, want)
				}
				checks++
				dropped += len(rep.Dropped)
				if s.olderTurns(&a, s.taskStart()) > 0 {
					cut++
				}
			}
			runLongSession(t, as, "long", longShape{tasks: c.tasks, resultBytes: 40, steps: c.steps, calls: c.calls, check: check})
			if cut == 0 || c.window > 0 && dropped == 0 {
				t.Fatalf("no build of %d left older turns out (%d), or dropped one for the budget (%d)", checks, cut, dropped)
			}
		})
	}
}

// taskStart is the running task's input in the history, past its end when none runs.
func (s *SessionState) taskStart() int {
	if s.active == nil {
		return len(s.history)
	}
	return s.active.start
}

// Re-activating a session of 1,000 tasks (a fold of its events, then its next
// model call's context) counts the tokens of the messages its history window may
// send, not of the whole conversation.
func TestLongSessionCountsOnlyItsWindow(t *testing.T) {
	as := Agents{Default: benchStepAgent()}
	_, events := longSession(t, as, "long", 1000, 256)
	s := NewSessionState("long").WithAgents(as)
	for _, e := range events {
		if err := s.Apply(e); err != nil {
			t.Fatal(err)
		}
	}
	a := as.Default
	_, _, rep := s.loopContext(&a)
	counted := 0
	for _, n := range s.ctx.turns {
		if n != 0 {
			counted++
		}
	}
	if max := 3*30 + 8; counted > max || rep.Older == 0 {
		t.Fatalf("the context counted %d of %d messages (want at most %d); %d older", counted, len(s.history), max, rep.Older)
	}
}

// A step of a long session whose agent compresses its conversation allocates for
// the candidates its compression sends, not for every message of the session:
// building the context of a session of 2,000 tasks allocates less than 200 kB (a
// buffer of one candidate per message would be over 1 MB).
func TestCompressedContextAllocatesForItsWindow(t *testing.T) {
	ag := benchStepAgent()
	ag.Context.Compression = Compression{Strategy: "window", Model: NoSummaryModel}
	as := Agents{Default: ag}
	s, _ := longSession(t, as, "long", 2000, 64)
	a := as.Default
	s.loopContext(&a)
	const builds = 10
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range builds {
		s.ctx.last.ok = false
		s.loopContext(&a)
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / builds; per > 200_000 {
		t.Fatalf("a build allocated %d bytes (%d messages in the conversation)", per, len(s.history))
	}
}

// A session's tasks keep no report of their model calls' contexts (the events do):
// a session that ran 5,000 tasks kept one per task, 12 MB of its 37 MB of state.
func TestTasksKeepNoContextReport(t *testing.T) {
	as := Agents{Default: benchStepAgent()}
	_, events := longSession(t, as, "long", 20, 64)
	s := NewSessionState("long").WithAgents(as)
	for _, e := range events {
		if err := s.Apply(e); err != nil {
			t.Fatal(err)
		}
	}
	for _, st := range []*SessionState{s, func() *SessionState { s, _ := longSession(t, as, "long", 20, 64); return s }()} {
		for _, task := range st.tasks {
			if task.model.Context != nil {
				t.Fatalf("task %s keeps the report of its model call's context", task.ID)
			}
		}
	}
}
