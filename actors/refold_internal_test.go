package actors

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// refoldShapes are recorded sessions of several shapes, by name: the tool loop
// with several calls per step, each compression strategy (with and without a
// summary model), the reflection paradigm, and tasks waiting their turn.
func refoldShapes(t *testing.T) map[string]struct {
	as     Agents
	events []messages.Envelope
} {
	t.Helper()
	out := map[string]struct {
		as     Agents
		events []messages.Envelope
	}{}
	as := Agents{Default: benchStepAgent()}
	_, events := runLongSession(t, as, "long", longShape{tasks: 6, resultBytes: 600, steps: 2, calls: 3})
	out["tools"] = struct {
		as     Agents
		events []messages.Envelope
	}{as, events}
	answer := func(step int) string {
		if step%3 == 0 {
			return "noted " + strings.Repeat("word ", 40)
		}
		return ""
	}
	for _, strategy := range []string{"window", "summary", "hierarchical", "importance", "compact", "mask", "window+mask"} {
		for _, summariser := range []string{"", NoSummaryModel} {
			a := compressAgent(Compression{Strategy: strategy, Window: 4, Step: 2, Model: summariser})
			a.Context.Window, a.Context.ReservedOutput = 3000, 200
			var steps []llm.ScriptStep
			for i := range 60 {
				if c := answer(i + 1); c != "" {
					steps = append(steps, llm.ScriptStep{Content: c})
				} else {
					steps = append(steps, callStep(fmt.Sprintf("call_%d", i), "fetch", fmt.Sprintf(`{"url":"p%d"}`, i)))
				}
			}
			r := newCompressRun(t, a, scriptOf(t, "m", steps...),
				scripted(t, "summariser", 60, func(step int) string { return fmt.Sprintf("summary %d", step) }),
				func(messages.ToolCallRequested) string { return bigPage })
			for i := range 8 {
				r.task(fmt.Sprintf("fact %d", i))
			}
			out[strategy+"/"+summariser] = struct {
				as     Agents
				events []messages.Envelope
			}{r.as, r.events}
		}
	}
	a := compressAgent(Compression{})
	a.Paradigm = Reflection{MaxRounds: 2}
	r := newCompressRun(t, a, scripted(t, "m", 40, func(step int) string { return fmt.Sprintf("draft %d", step) }),
		scripted(t, "critic", 40, func(step int) string {
			if step%2 == 1 {
				return `{"verdict":"revise","issues":[{"issue":"too short"}]}`
			}
			return `{"verdict":"pass"}`
		}), noTools)
	for i := range 4 {
		r.task(fmt.Sprintf("question %d", i))
	}
	out["reflection"] = struct {
		as     Agents
		events []messages.Envelope
	}{r.as, r.events}
	// Tasks submitted while one runs, one of them failing at its deadline while it
	// waits its turn (decideQueued).
	r = newCompressRun(t, compressAgent(Compression{}), scripted(t, "m", 40, func(step int) string { return fmt.Sprintf("answer %d", step) }), nil, noTools)
	for i := range 5 {
		deadline := int64(0)
		if i == 2 {
			deadline = 7
		}
		r.add(&messages.TaskSubmitted{Input: fmt.Sprintf("question %d", i), Rules: ContextRules, DeadlineUS: deadline}, "", "", "ingress")
	}
	r.settle()
	r.task("question 5")
	out["queued"] = struct {
		as     Agents
		events []messages.Envelope
	}{r.as, r.events}
	return out
}

// A refold skips the context reports of model requests (decodeFolded): the state
// it folds, after every event, is the one folding each event's whole payload
// (Envelope.Decode) gives, and so are its next decision and the request it sends.
func TestRefoldWithoutContextReportsFoldsTheSameState(t *testing.T) {
	for name, sh := range refoldShapes(t) {
		t.Run(name, func(t *testing.T) {
			reports, purposes := 0, 0
			whole := NewSessionState("x").WithAgents(sh.as)
			skipped := NewSessionState("x").WithAgents(sh.as)
			for i, e := range sh.events {
				if i == 0 {
					whole.SessionID, skipped.SessionID = e.SessionID, e.SessionID
				}
				p, err := e.Decode()
				if err != nil {
					t.Fatal(err)
				}
				if r, ok := p.(*messages.ModelRequested); ok && r.Context != nil {
					reports++
				}
				if r, ok := p.(*messages.ModelRequested); ok && r.Purpose != "" && r.Context != nil {
					purposes++
				}
				if err := whole.apply(e, p); err != nil {
					t.Fatal(err)
				}
				if err := skipped.Apply(e); err != nil {
					t.Fatal(err)
				}
				for _, q := range skipped.tasks[:skipped.unqueued] {
					if q.phase == phaseQueued {
						t.Fatalf("after event %d task %s waits its turn before the first that may (%d)", e.Seq, q.ID, skipped.unqueued)
					}
				}
				if !reflect.DeepEqual(whole, skipped) {
					t.Fatalf("after event %d (%s) the states differ", e.Seq, e.Type)
				}
				dw := whole.DecideAmong(sh.as, whole.LastSeq+1, e.TS+1)
				ds := skipped.DecideAmong(sh.as, skipped.LastSeq+1, e.TS+1)
				if !reflect.DeepEqual(dw, ds) {
					t.Fatalf("after event %d (%s) the decisions differ:\n%+v\n%+v", e.Seq, e.Type, dw, ds)
				}
				if _, _, ok := whole.PendingModel(); ok {
					bw, err := json.Marshal(whole.Request(sh.as.Default))
					if err != nil {
						t.Fatal(err)
					}
					bs, err := json.Marshal(skipped.Request(sh.as.Default))
					if err != nil {
						t.Fatal(err)
					}
					if string(bw) != string(bs) {
						t.Fatalf("after event %d the requests differ:\n%s\n%s", e.Seq, bw, bs)
					}
				}
			}
			if reports == 0 {
				t.Fatal("no model request of the session has a context report")
			}
			if (name == "reflection" || name == "summary/") && purposes == 0 {
				t.Fatal("no model request of a paradigm or a compression has a context report")
			}
			a := sh.as.Default
			mw, tw, rw := whole.loopContext(&a)
			ms, ts, rs := skipped.loopContext(&a)
			if !reflect.DeepEqual(mw, ms) || !reflect.DeepEqual(tw, ts) || !reflect.DeepEqual(rw, rs) {
				t.Fatal("the next loop contexts differ")
			}
		})
	}
}

// Folding a model request decodes nothing of its context report: a report of
// 500 items costs the fold no allocation per item, and a payload that does not decode fails
// the fold as Envelope.Decode says.
func TestRefoldDoesNotDecodeContextReports(t *testing.T) {
	task, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: "hi", Rules: ContextRules})
	if err != nil {
		t.Fatal(err)
	}
	task.ID, task.SessionID, task.Seq, task.CorrelationID = "s/1", "s", 1, "s/1"
	request := func(report *messages.ContextReport) messages.Envelope {
		e, err := messages.NewEnvelope(&messages.ModelRequested{Key: "s/2", Model: "m", Step: 1, Messages: 3, PromptHash: "h", Tools: []string{"fetch"}, Context: report})
		if err != nil {
			t.Fatal(err)
		}
		e.ID, e.SessionID, e.Seq, e.CausationID, e.CorrelationID = "s/2", "s", 2, "s/1", "s/1"
		return e
	}
	fold := func(e messages.Envelope) (float64, *SessionState) {
		var s *SessionState
		return testing.AllocsPerRun(5, func() {
			s = NewSessionState("s")
			if err := s.Apply(task); err != nil {
				t.Fatal(err)
			}
			if err := s.Apply(e); err != nil {
				t.Fatal(err)
			}
		}), s
	}
	report := &messages.ContextReport{Window: 8000, Budget: 6000}
	for i := range 500 {
		report.Kept = append(report.Kept, messages.ContextItem{ID: fmt.Sprintf("turn/%d", i), Kind: "turn", Tokens: 10, Score: 0.5})
	}
	bare, sb := fold(request(nil))
	with, sw := fold(request(report))
	if with > bare+2 { // encoding/json's scanner grows its stack for the report's depth
		t.Fatalf("folding a model request with a report of 500 items made %.0f allocations, %.0f without it", with, bare)
	}
	if !reflect.DeepEqual(sb, sw) {
		t.Fatal("the request folded to another state with its report")
	}
	bad := request(nil)
	bad.Payload = []byte(`{"key":"s/2","step":"one","context":{}}`)
	_, want := bad.Decode()
	s := NewSessionState("s")
	if err := s.Apply(task); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(bad); err == nil || err.Error() != want.Error() {
		t.Fatalf("a corrupt payload: %v, want %v", err, want)
	}
}

// decodeFolded decodes a model request as Envelope.Decode does, its report
// aside, and fails where it fails, whatever the place, the spacing and the
// validity of the report's member.
func TestDecodeFoldedMatchesDecode(t *testing.T) {
	report := `{"window":8000,"kept":[{"id":"turn/1","kind":"turn","tokens":3,"score":0.5}],"notes":["a,\"context\":1}"]}`
	payloads := []string{
		`{"key":"s/2","model":"m","step":1,"messages":3,"prompt_hash":"h","tools":["fetch"],"context":` + report + `}`,
		`{"key":"s/2","model":"m","step":1,"context":` + report + `,"messages":3}`,
		`{"context":` + report + `,"key":"s/2","step":2}`,
		`{"context":` + report + `}`,
		` { "key" : "s/2" , "step":1 ,"context": ` + report + ` } ` + "\n",
		`{"key":"s/2","step":1,"context":null}`,
		`{"key":"s/2","step":1,"context":{"notes":[{"context":1}],"kept":[]},"context":{}}`,
		`{"key":"s/2","step":1,"Context":{},"context":{}}`,
		`{"key":"a,\"context\":{}}","step":1}`,
		`{"key":"s/2","step":1}`,
		// Not JSON, or not a model request: each fails as Decode fails.
		`{,"context":{}}`,
		`{"key":"s/2",,"context":{}}`,
		`{"key":"s/2","step":"one","context":{}}`,
		`{"key":"s/2","ConteXt":{"kept":[{"kind":0}]}}`,
		`{"key":"s/2","context":5}`,
		`{"key":"s/2","context":{"kept":[}`,
		`{"key":"s/2","context":{}}}`,
		`{"key":"s/2","context":{} {}}`,
		`{"key":"s/2","context":}`,
		`{"key":"s/2" "x","context":{}}`,
		`{"key":"s/2","context":{}`,
		`[1,"context":{}}`,
		`{"key":"s/2,"context":{}}`,
		``,
	}
	for _, payload := range payloads {
		checkDecodeFolded(t, []byte(payload))
	}
}

func checkDecodeFolded(t *testing.T, payload []byte) {
	t.Helper()
	e := messages.Envelope{ID: "s/2", SessionID: "s", Seq: 2, Type: messages.TypeModelRequested, Version: 1, Payload: payload}
	want, wantErr := e.Decode()
	if wantErr != nil {
		// A report that is JSON and not of a report's shape: the fold skips it,
		// and decodes the rest.
		var skipped struct {
			messages.ModelRequested
			Context skippedJSON `json:"context"`
		}
		if json.Unmarshal(payload, &skipped) == nil {
			want, wantErr = &skipped.ModelRequested, nil
		}
	}
	got, err := decodeFolded(e)
	if wantErr != nil || err != nil {
		if wantErr == nil || err == nil || err.Error() != wantErr.Error() {
			t.Fatalf("%s: got %v, want %v", payload, err, wantErr)
		}
		return
	}
	w := *want.(*messages.ModelRequested)
	w.Context = nil
	if !reflect.DeepEqual(*got.(*messages.ModelRequested), w) {
		t.Fatalf("%s: got %+v, want %+v", payload, got, w)
	}
}

func FuzzDecodeFolded(f *testing.F) {
	f.Add([]byte(`{"key":"s/2","model":"m","step":1,"messages":3,"prompt_hash":"h","tools":["fetch"],"context":{"window":8000,"kept":[{"id":"turn/1","kind":"turn","tokens":3,"score":0.5}]}}`))
	f.Add([]byte(`{"key":"s/2","context":{} }`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		checkDecodeFolded(t, payload)
	})
}
