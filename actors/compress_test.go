package actors_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	pctx "github.com/troupe-run/troupe/pipelines/context"
)

// A session that died while a summary was requested and not answered resumes by
// issuing that call again with its recorded key, once; one that died after the
// summary's answer was recorded resumes without calling it again. Either way the
// session then finishes its task and verifies.
func TestCompressSummaryResumesAfterACrashWithoutRepeatingIt(t *testing.T) {
	for _, answered := range []bool{false, true} {
		t.Run(fmt.Sprintf("answered=%v", answered), func(t *testing.T) {
			agent := actors.Agent{Name: "default", Model: "scripted", SystemPrompt: "test", MaxSteps: 5,
				Context: actors.ContextOptions{Compression: actors.Compression{Strategy: pctx.CompressSummary, Window: 2, Step: 2}}}
			// An earlier process recorded three tasks; the third's summary call was
			// requested (and, answered, answered); then the process died.
			st := actors.NewSessionState("s").WithAgents(actors.Agents{Default: agent})
			var recorded []messages.Envelope
			add := func(p messages.Payload, task string, cause ...string) {
				e := env(t, p, "s", st.LastSeq+1, task)
				if len(cause) > 0 {
					e.CausationID = cause[0]
				}
				e.ID = fmt.Sprintf("s/%d", e.Seq)
				if p.MessageType() == messages.TypeTaskSubmitted {
					e.ID = task
				}
				e.CorrelationID = task
				if err := st.Apply(e); err != nil {
					t.Fatal(err)
				}
				recorded = append(recorded, e)
			}
			var summary *messages.ModelRequested
			for i := range 3 {
				task := fmt.Sprintf("t%d", i)
				add(&messages.TaskSubmitted{Input: fmt.Sprintf("fact %d", i), Rules: actors.ContextRules}, task)
				for {
					d := st.Decide(agent, st.LastSeq+1, 0)
					mr, ok := d.Payload.(*messages.ModelRequested)
					if ok && mr.Purpose == pctx.PurposeSummarise {
						summary = mr
						add(mr, task, d.CausationID)
						if !answered {
							break
						}
						add(&messages.ModelResponded{Key: mr.Key, Model: "scripted", Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "the summary"}}, task, recorded[len(recorded)-1].ID)
						continue
					}
					if ok && i == 2 {
						break // died before the loop's call of the third task
					}
					add(d.Payload, task, d.CausationID)
					if ok {
						add(&messages.ModelResponded{Key: mr.Key, Model: "scripted", Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "noted"}}, task, recorded[len(recorded)-1].ID)
						continue
					}
					break // the task completed
				}
			}
			if summary == nil || summary.Step != 1 {
				t.Fatalf("the recording has no summary call as its third task's first step: %+v", summary)
			}
			dir := t.TempDir()
			lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			if err := lg.Append(context.Background(), recorded); err != nil {
				t.Fatal(err)
			}
			_ = lg.Close()

			model := &countingModel{Model: script(t, llm.ScriptStep{Content: "the summary"}, llm.ScriptStep{Content: "done"})}
			h := newHarness(t, harnessOpts{dir: dir, model: model, deps: func(d *actors.SessionDeps) { d.Agent = agent }})
			h.system.Root.Send(h.host, &actors.ResumeSession{SessionID: "s"})
			events := h.wait("s")
			assertGapFree(t, events)
			if want := map[bool]int{false: 1, true: 0}[answered]; model.calls[summary.Key] != want || model.total() != want+1 {
				t.Fatalf("model calls after the restart %v: want the summary's %d time(s) and the loop's once", model.calls, want)
			}
			n := 0
			for _, e := range events {
				if e.Type == messages.TypeModelResponded && decode[*messages.ModelResponded](t, e).Key == summary.Key {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("the summary's answer is recorded %d times", n)
			}
			if got := decode[*messages.TaskCompleted](t, events[len(events)-1]).Output; got != "done" {
				t.Fatalf("output %q", got)
			}
			if div, err := actors.Verify(agent, events); err != nil || div != nil {
				t.Fatalf("verify: %v %v", div, err)
			}
		})
	}
}
