package actors

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// roundTrip returns s encoded and decoded (a fold snapshot's state).
func roundTrip(t *testing.T, s *SessionState) *SessionState {
	t.Helper()
	b, err := encodeState(s)
	if err != nil {
		t.Fatal(err)
	}
	r, err := decodeState(b, s.SessionID, s.agents)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// sameFold returns where two states differ ("" where they are deeply equal), the
// request-building cache (which a snapshot does not hold) aside.
func sameFold(a, b *SessionState) string {
	ca, cb, ka, kb := a.ctx, b.ctx, a.key, b.key
	a.ctx, b.ctx = contextCache{}, contextCache{}
	a.key, b.key = ka, ka // keyAt's memo
	defer func() { a.ctx, b.ctx, a.key, b.key = ca, cb, ka, kb }()
	if reflect.DeepEqual(a, b) {
		return ""
	}
	if d := foldDiff(reflect.ValueOf(a), reflect.ValueOf(b), "s"); d != "" {
		return d
	}
	return "(somewhere)"
}

// A fold snapshot taken after any event, with the events after it folded on
// top, is the state the whole history folds to: after every event of sessions
// of many shapes (tools, every compression strategy, reflection, plan_execute,
// queued tasks, a long session), the state restored from a snapshot taken at the previous event
// and folded on equals the full fold, and so do its next decision and request;
// and states restored at a few seqs and folded through the whole rest equal the
// last full fold.
func TestSnapshotThenTailFoldsTheSameState(t *testing.T) {
	shapes := refoldShapes(t)
	as := Agents{Default: benchStepAgent()}
	_, events := runLongSession(t, as, "long", longShape{tasks: 30, resultBytes: 300, steps: 2, calls: 2})
	shapes["long"] = struct {
		as     Agents
		events []messages.Envelope
	}{as, events}
	// A plan_execute task: a tool step, and a goal step that runs the loop.
	calc := messages.ToolSpec{Name: "calculator", Description: "computes", Parameters: []byte(`{"type":"object"}`)}
	pas := Agents{Default: benchStepAgent(), Named: map[string]Agent{"reviewer": {Name: "reviewer", Model: "m", Tools: []messages.ToolSpec{calc}, Paradigm: PlanExecute{}}}}
	pevents, _ := runScripted(t, pas, "What is 2 + 3, explained?", map[string][]string{
		PurposePlan:   {`{"steps": [{"id": "s1", "tool": "calculator", "args": {"expression": "2+3"}, "deps": []}, {"id": "s2", "goal": "explain the sum", "deps": ["s1"]}]}`},
		PurposeStep:   {"it is five", "it is five"},
		"":            {"it is five", "it is five"},
		PurposeAnswer: {"5, since 2 + 3 = 5"},
	}, func(messages.ToolCallRequested) string { return "5" })
	if last := pevents[len(pevents)-1]; last.Type != messages.TypeTaskCompleted || len(pevents) < 8 {
		t.Fatalf("the plan_execute task ended with %s after %d events", last.Type, len(pevents))
	}
	shapes["plan_execute"] = struct {
		as     Agents
		events []messages.Envelope
	}{pas, pevents}
	for name, sh := range shapes {
		t.Run(name, func(t *testing.T) {
			// step folds e into s and decides as a session actor does, which fills
			// the memos the decisions keep in the state.
			step := func(s *SessionState, e messages.Envelope) (*Decision, []byte) {
				if err := s.Apply(e); err != nil {
					t.Fatalf("event %d (%s): %v", e.Seq, e.Type, err)
				}
				d := s.DecideAmong(sh.as, s.LastSeq+1, e.TS+1)
				if _, _, ok := s.PendingModel(); ok {
					b, err := json.Marshal(s.Request(sh.as.Default))
					if err != nil {
						t.Fatal(err)
					}
					return d, b
				}
				return d, nil
			}
			whole := NewSessionState(sh.events[0].SessionID).WithAgents(sh.as)
			restored := roundTrip(t, whole)
			var cuts []*SessionState
			for i, e := range sh.events {
				dw, bw := step(whole, e)
				dr, br := step(restored, e)
				if diff := sameFold(whole, restored); diff != "" {
					t.Fatalf("after event %d (%s) the state restored at the previous event differs from the full fold at %s", e.Seq, e.Type, diff)
				}
				if !reflect.DeepEqual(dw, dr) || string(bw) != string(br) {
					t.Fatalf("after event %d (%s) the decisions or requests differ:\n%+v %s\n%+v %s", e.Seq, e.Type, dw, bw, dr, br)
				}
				for _, c := range cuts {
					step(c, e)
				}
				restored = roundTrip(t, whole)
				if i%(len(sh.events)/7+1) == 0 {
					cuts = append(cuts, roundTrip(t, whole))
				}
			}
			if len(cuts) < 3 {
				t.Fatalf("%d cuts", len(cuts))
			}
			for _, c := range cuts[:len(cuts)-1] {
				if diff := sameFold(whole, c); diff != "" {
					t.Fatalf("a state restored from a snapshot, folded to the end, differs from the full fold at %s", diff)
				}
			}
		})
	}
}

// foldDiff names the first place where a and b differ ("" if none).
func foldDiff(a, b reflect.Value, path string) string {
	if a.Kind() != b.Kind() {
		return path
	}
	switch a.Kind() {
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() || b.IsNil() {
			if a.IsNil() != b.IsNil() {
				return path + " (nil)"
			}
			return ""
		}
		if a.Kind() == reflect.Interface && a.Elem().Type() != b.Elem().Type() {
			return path + " (type)"
		}
		return foldDiff(a.Elem(), b.Elem(), path)
	case reflect.Struct:
		for i := range a.NumField() {
			if d := foldDiff(a.Field(i), b.Field(i), path+"."+a.Type().Field(i).Name); d != "" {
				return d
			}
		}
		return ""
	case reflect.Slice, reflect.Array:
		if a.Kind() == reflect.Slice && a.IsNil() != b.IsNil() {
			return path + " (nil slice)"
		}
		if a.Len() != b.Len() {
			return path + " (len)"
		}
		for i := range a.Len() {
			if d := foldDiff(a.Index(i), b.Index(i), path+"["+strconv.Itoa(i)+"]"); d != "" {
				return d
			}
		}
		return ""
	case reflect.Map:
		if a.IsNil() != b.IsNil() {
			return path + " (nil map)"
		}
		if a.Len() != b.Len() {
			return path + " (map len)"
		}
		it := a.MapRange()
		for it.Next() {
			y := b.MapIndex(it.Key())
			if !y.IsValid() {
				return path + " (key)"
			}
			if d := foldDiff(it.Value(), y, path+"{}"); d != "" {
				return d
			}
		}
		return ""
	case reflect.Func:
		if a.IsNil() != b.IsNil() {
			return path
		}
		return ""
	case reflect.Float32, reflect.Float64:
		if a.Float() != b.Float() {
			return path
		}
		return ""
	case reflect.String:
		if a.String() != b.String() {
			return path
		}
		return ""
	case reflect.Bool:
		if a.Bool() != b.Bool() {
			return path
		}
		return ""
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if a.Int() != b.Int() {
			return path
		}
		return ""
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		if a.Uint() != b.Uint() {
			return path
		}
		return ""
	}
	return ""
}

// failingSnapshots is a log whose snapshots cannot be read.
type failingSnapshots struct{ *readCounter }

func (failingSnapshots) LoadSnapshot(context.Context, string) (eventlog.FoldSnapshot, bool, error) {
	return eventlog.FoldSnapshot{}, false, errors.New("disk on fire")
}

// A session uses its fold snapshot only when everything about it holds: one of
// other rules, another codec, other agents, a checksum that does not hold, a
// state that does not decode (or decodes to another seq), or an event at its seq
// that is not the log's (another ID or content, or none) is ignored, and so is a
// snapshot the log fails to read: the session folds its whole history, and its
// next task runs as ever. Each activation is passivated after its task, which
// saves a good snapshot again.
func TestSessionIgnoresASnapshotThatDoesNotHold(t *testing.T) {
	ctx := context.Background()
	ag, lg, events := loggedLongSession(t, "s", 40, 64)
	reg, err := tools.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	effects := NewLocalEffects(LocalEffectsConfig{Model: llm.Offline{}, Tools: reg})
	defer effects.Close()
	sys := quietSystem()
	defer sys.Shutdown()
	counter := &readCounter{Log: lg}
	from, k := uint64(len(events))+1, 0
	// activate runs a task in the session on a new host, passivates it, and
	// returns how many events it read.
	activate := func(store EventStore) int64 {
		t.Helper()
		counter.events.Store(0)
		host := sys.Root.Spawn(NewSessionHostProps(SessionDeps{Store: store, Effects: effects, Agent: ag, SnapshotAfter: 1}))
		k++
		id := fmt.Sprintf("again-%d", k)
		submitTask(t, sys, host, "s", id)
		waitTaskEnd(t, lg, "s", id, &from)
		if err := sys.Root.PoisonFuture(host).Wait(); err != nil {
			t.Fatal(err)
		}
		all, err := lg.Read(ctx, "s", 1)
		if err != nil {
			t.Fatal(err)
		}
		if last := all[len(all)-1]; last.Type != messages.TypeTaskCompleted || last.CorrelationID != id {
			t.Fatalf("task %s ended with %s %s", id, last.Type, last.CorrelationID)
		}
		return counter.events.Load()
	}
	if n := activate(counter); n < int64(len(events)) {
		t.Fatalf("the first activation read %d events", n)
	}
	good, ok, err := lg.LoadSnapshot(ctx, "s")
	if err != nil || !ok {
		t.Fatalf("no snapshot saved at passivation: %v %v", ok, err)
	}
	resum := func(s *eventlog.FoldSnapshot) { s.Sum = stateSum(s.State) }
	cases := []struct {
		name   string
		tamper func(*eventlog.FoldSnapshot)
		store  EventStore
	}{
		{"rules", func(s *eventlog.FoldSnapshot) { s.Rules-- }, nil},
		{"codec", func(s *eventlog.FoldSnapshot) { s.Codec = "0/" + s.Codec }, nil},
		{"agents", func(s *eventlog.FoldSnapshot) { s.Agents = agentsDigest(&Agents{Default: benchStepAgent()}) }, nil},
		{"checksum", func(s *eventlog.FoldSnapshot) { s.State[len(s.State)/2]++ }, nil},
		{"garbage", func(s *eventlog.FoldSnapshot) { s.State = []byte("not a state at all"); resum(s) }, nil},
		{"truncated", func(s *eventlog.FoldSnapshot) { s.State = s.State[:len(s.State)*2/3]; resum(s) }, nil},
		{"event ID", func(s *eventlog.FoldSnapshot) { s.EventID = "s/other" }, nil},
		{"event content", func(s *eventlog.FoldSnapshot) { s.EventSum = eventSum(events[0]) }, nil},
		{"beyond the log", func(s *eventlog.FoldSnapshot) { s.Seq += 1000 }, nil},
		{"state of another seq", func(s *eventlog.FoldSnapshot) { s.State, s.Sum = good.State, good.Sum }, nil},
		{"read fails", func(*eventlog.FoldSnapshot) {}, failingSnapshots{counter}},
	}
	for _, c := range cases {
		snap, ok, err := lg.LoadSnapshot(ctx, "s")
		if err != nil || !ok || snap.Seq <= good.Seq && c.name != "rules" {
			t.Fatalf("%s: no new snapshot saved at passivation: %+v %v %v", c.name, snap.Seq, ok, err)
		}
		// The log holds a good snapshot: a session uses it.
		if n := activate(counter); n > 20 {
			t.Fatalf("before %s: a good snapshot, and the session read %d events", c.name, n)
		}
		if snap, _, err = lg.LoadSnapshot(ctx, "s"); err != nil {
			t.Fatal(err)
		}
		snap.State = bytes.Clone(snap.State)
		c.tamper(&snap)
		if err := lg.SaveSnapshot(ctx, snap); err != nil {
			t.Fatal(err)
		}
		store := c.store
		if store == nil {
			store = counter
		}
		if n := activate(store); n < int64(len(events)) {
			t.Fatalf("%s: the session read %d events, want its whole history", c.name, n)
		}
	}
}

// Bytes that are no state's encoding (each prefix of one, and one with any of
// its bytes changed) decode to an error or to a state, never to a panic, and
// allocate no more than they hold.
func TestDecodeStateOfCorruptBytesFailsCleanly(t *testing.T) {
	as := Agents{Default: benchStepAgent()}
	s, _ := runLongSession(t, as, "s", longShape{tasks: 3, resultBytes: 40, steps: 2, calls: 2})
	b, err := encodeState(s)
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		if _, err := decodeState(b[:i], "s", &as); err == nil {
			t.Fatalf("a prefix of %d bytes of %d decoded", i, len(b))
		}
		c := bytes.Clone(b)
		for _, x := range []byte{0xff, 0x80, 0x01} {
			c[i] ^= x
			decodeState(c, "s", &as) //nolint:errcheck // an error or a state: no panic
			c[i] ^= x
		}
	}
	if _, err := decodeState(b, "other", &as); err == nil {
		t.Fatal("the state of session s decoded as other's")
	}
}

// A state holding what the codec does not encode (a team's run, which holds its
// compiled paradigm) has no snapshot: its session folds from the start.
func TestStateOfATeamHasNoSnapshot(t *testing.T) {
	s := NewSessionState("s")
	s.tasks = []*taskState{{ID: "t", run: &teamRun{team: &team{}}}}
	if _, err := encodeState(s); !errors.Is(err, errNoSnapshot) {
		t.Fatalf("encodeState = %v, want errNoSnapshot", err)
	}
}

// BenchmarkFoldSnapshot encodes (as a session passivating does) and decodes (as
// one re-activated does) the state of a session of 5,000 tasks; bytes/op is the
// snapshot's size.
//
//	go test ./actors -run '^$' -bench BenchmarkFoldSnapshot -benchmem
func BenchmarkFoldSnapshot(b *testing.B) {
	as := Agents{Default: benchStepAgent()}
	s, _ := longSession(b, as, "long", 5000, 1024)
	enc, err := encodeState(s)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("encode", func(b *testing.B) {
		for b.Loop() {
			if _, err := encodeState(s); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(enc)), "bytes/op")
	})
	b.Run("decode", func(b *testing.B) {
		for b.Loop() {
			if _, err := decodeState(enc, "long", &as); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// stalledModel is the offline model that answers nothing until its call's
// context ends (a node killed amid the call).
type stalledModel struct{ llm.Offline }

func (stalledModel) Generate(ctx context.Context, _ llm.Request) (llm.Response, error) {
	<-ctx.Done()
	return llm.Response{}, ctx.Err()
}

// A session with a fold snapshot whose actor stopped amid a task (its model call
// requested, not answered: a crash) saves no snapshot of that state, and recovers
// from its whole history, as without a snapshot: it issues the call again and
// the task completes.
func TestSessionStoppedAmidATaskRecoversFromItsWholeHistory(t *testing.T) {
	ctx := context.Background()
	ag, lg, events := loggedLongSession(t, "s", 40, 64)
	reg, err := tools.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	sys := quietSystem()
	defer sys.Shutdown()
	counter := &readCounter{Log: lg}
	from := uint64(len(events)) + 1
	host := func(m llm.Model) (*actor.PID, func()) {
		effects := NewLocalEffects(LocalEffectsConfig{Model: m, Tools: reg})
		return sys.Root.Spawn(NewSessionHostProps(SessionDeps{Store: counter, Effects: effects, Agent: ag, SnapshotAfter: 1})), func() { effects.Close() }
	}
	h, closeEffects := host(llm.Offline{})
	submitTask(t, sys, h, "s", "first")
	waitTaskEnd(t, lg, "s", "first", &from)
	if err := sys.Root.PoisonFuture(h).Wait(); err != nil {
		t.Fatal(err)
	}
	closeEffects()
	good, ok, err := lg.LoadSnapshot(ctx, "s")
	if err != nil || !ok {
		t.Fatalf("no snapshot: %v %v", ok, err)
	}
	// The next task stalls in its model call, and its session stops.
	h, closeEffects = host(stalledModel{})
	submitTask(t, sys, h, "s", "stalled")
	deadline := time.Now().Add(30 * time.Second)
	for {
		evs, err := lg.Read(ctx, "s", good.Seq+1)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) > 0 && evs[len(evs)-1].Type == messages.TypeModelRequested {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the task's model call was not requested in 30 s")
		}
		time.Sleep(time.Millisecond)
	}
	if err := sys.Root.PoisonFuture(h).Wait(); err != nil {
		t.Fatal(err)
	}
	closeEffects()
	if snap, _, err := lg.LoadSnapshot(ctx, "s"); err != nil || snap.Seq != good.Seq {
		t.Fatalf("a session stopped amid a task saved a snapshot at seq %d (had %d): %v", snap.Seq, good.Seq, err)
	}
	counter.events.Store(0)
	h, closeEffects = host(llm.Offline{})
	defer closeEffects()
	if res, err := sys.Root.RequestFuture(h, &ResumeSession{SessionID: "s"}, 30*time.Second).Result(); err != nil {
		t.Fatalf("resume: %v %v", res, err)
	}
	waitTaskEnd(t, lg, "s", "stalled", &from)
	if n := counter.events.Load(); n < int64(len(events)) {
		t.Fatalf("the session resumed amid a task read %d events, want its whole history", n)
	}
	all, err := lg.Read(ctx, "s", 1)
	if err != nil {
		t.Fatal(err)
	}
	if last := all[len(all)-1]; last.Type != messages.TypeTaskCompleted || last.CorrelationID != "stalled" {
		t.Fatalf("the stalled task ended with %s", last.Type)
	}
	if err := sys.Root.PoisonFuture(h).Wait(); err != nil {
		t.Fatal(err)
	}
}

// The agents' digest, a fold snapshot's key, is the same for agents built alike
// (pointers, maps and compiled routes digested by what they hold, not where), and
// another when the configuration a fold depends on differs.
func TestAgentsDigestIsOfTheConfiguration(t *testing.T) {
	build := func(prompt string, rounds int, route string) *Agents {
		team, err := NewTeam(Team{Pattern: TeamOrchestrator, Fallback: "b",
			Members: []TeamMember{{Name: "a", Description: "adds"}, {Name: "b", Description: "backs up"}},
			Routes:  []TeamRoute{{Match: route, Member: "a"}}})
		if err != nil {
			t.Fatal(err)
		}
		a := benchStepAgent()
		a.SystemPrompt = prompt
		a.Approvals = map[string]bool{"calculator": true, "clock": false}
		r := benchStepAgent()
		r.Name, r.Paradigm = "reviewer", Reflection{MaxRounds: rounds}
		m := benchStepAgent()
		m.Name, m.Paradigm = "team", team
		return &Agents{Default: a, Named: map[string]Agent{"reviewer": r, "team": m, "x": benchStepAgent(), "y": benchStepAgent()}}
	}
	d := agentsDigest(build("p", 2, "^add"))
	for range 5 {
		if got := agentsDigest(build("p", 2, "^add")); got != d {
			t.Fatal("agents built alike have other digests")
		}
	}
	for _, other := range []*Agents{build("q", 2, "^add"), build("p", 3, "^add"), build("p", 2, "^sum")} {
		if agentsDigest(other) == d {
			t.Fatal("agents configured otherwise have the same digest")
		}
	}
}

// A snapshot is used only by the build that saved it: its key names the running
// executable's digest beside the state's layout, so a fold fixed without a field
// changed does not take a state the old fold made.
func TestSnapshotKeyNamesTheBuild(t *testing.T) {
	build := snapshotBuild()
	if len(build) != 24 {
		t.Fatalf("snapshotBuild() = %q, want the executable's digest", build)
	}
	key := snapshotKey(&Agents{})
	if key.Codec != snapshotLayout+"/"+build {
		t.Fatalf("key's codec %q, want the layout %q and the build %q", key.Codec, snapshotLayout, build)
	}
}
