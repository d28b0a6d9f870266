package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// heldModel answers the lead's calls with a delegation and then an answer (any
// other agent's with that answer), and the helper's with a calculator call (held until release closes) and then 42.
type heldModel struct {
	release chan struct{}
	helper  atomic.Int64
}

func (m *heldModel) Name() string { return "held" }

func (m *heldModel) Generate(ctx context.Context, r llm.Request) (llm.Response, error) {
	msg := messages.ChatMessage{Role: messages.RoleAssistant}
	switch {
	case r.Scope.Agent == "lead" && r.Step == 1:
		msg.ToolCalls = []messages.ToolCall{{ID: "d1", Name: DelegateTool, Arguments: `{"agent":"helper","task":"What is 6*7?"}`}}
	case r.Scope.Agent != "helper":
		msg.Content = "done"
	case r.Step == 1:
		m.helper.Add(1)
		select {
		case <-m.release:
		case <-ctx.Done():
			return llm.Response{}, ctx.Err()
		}
		msg.ToolCalls = []messages.ToolCall{{ID: "c1", Name: "calculator", Arguments: `{"expression":"6*7"}`}}
	default:
		m.helper.Add(1)
		msg.Content = "42"
	}
	return llm.Response{Message: msg}, nil
}

// The same delegate call performed again, while its child runs and after it
// ended (as another node would after a hand-over, without this node's memory of
// the answer), waits for the same child and answers as the first did: the child
// has one task, and its model is called once per step.
func TestDelegatePerformedAgainFindsTheSameChild(t *testing.T) {
	model := &heldModel{release: make(chan struct{})}
	n, err := New(context.Background(), Config{DataDir: t.TempDir(), Model: model, Agents: []NamedAgent{
		{Name: "lead", Tools: []string{DelegateTool}},
		{Name: "helper", Tools: []string{"calculator"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := n.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	if _, err := n.Submit(context.Background(), Task{Input: "go", SessionID: "boss", Agent: "lead"}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); model.helper.Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the child's model was never called")
		}
	}
	ctx, cancel := context.WithTimeout(tools.WithCallKey(context.Background(), "boss/4"), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var again string
	var againErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		again, againErr = n.delegate(ctx, delegateArgs{Agent: "helper", Task: "What is 6*7?"})
	}()
	// Give it time to submit and wait before the child may end; should it be slower,
	// it finds the child ended instead, and what is checked below holds all the same.
	time.Sleep(50 * time.Millisecond)
	close(model.release)
	wg.Wait()
	if again != "42" || againErr != nil {
		t.Fatalf("the call performed again while its child ran: %q %v", again, againErr)
	}
	res, err := n.RunTask(ctx, Task{Input: "unused", SessionID: "other"}) // the node keeps working
	if err != nil || res.Status != messages.StatusCompleted {
		t.Fatalf("another task: %+v %v", res, err)
	}
	before, _ := n.log.Read(ctx, "boss.sub4", 1)
	if again, err := n.delegate(ctx, delegateArgs{Agent: "helper", Task: "What is 6*7?"}); again != "42" || err != nil {
		t.Fatalf("the call performed again after its child ended: %q %v", again, err)
	}
	after, _ := n.log.Read(ctx, "boss.sub4", 1)
	tasks := 0
	for _, e := range after {
		if e.Type == messages.TypeTaskSubmitted {
			tasks++
		}
	}
	if len(after) != len(before) || tasks != 1 || model.helper.Load() != 2 {
		t.Errorf("the child: %d events then %d, %d tasks, its model called %d times; want no new event, 1 task, 2 calls",
			len(before), len(after), tasks, model.helper.Load())
	}
}

// A delegate call that its parent cancelled as it was performed again, before
// the call reached its child (the node performs it with its context ended by
// Effects.Cancel, as when a parent resumed on another node is cancelled at once),
// cancels the child that the call's earlier performance started: the child does
// not run on for its 30 minutes, its model paid for nobody.
func TestDelegateCallCancelledAsItStartsCancelsItsChild(t *testing.T) {
	model := &heldModel{release: make(chan struct{})}
	t.Cleanup(func() { close(model.release) })
	n, err := New(context.Background(), Config{DataDir: t.TempDir(), Model: model, Agents: []NamedAgent{
		{Name: "lead", Tools: []string{DelegateTool}},
		{Name: "helper", Tools: []string{"calculator"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := n.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	if _, err := n.Submit(context.Background(), Task{Input: "go", SessionID: "boss", Agent: "lead"}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); model.helper.Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the child's model was never called")
		}
	}
	var delegate tools.Tool
	for _, tl := range n.cfg.Tools {
		if tl.Spec().Name == DelegateTool {
			delegate = tl
		}
	}
	// The call's context as the node's effects hand it over when the session
	// cancelled the call before it ran (LocalEffects.Cancel).
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(actors.ErrEffectCancelled)
	_, err = tools.CallLimited(ctx, delegate, DelegateTool, tools.Call{Key: "boss/4", Arguments: `{"agent":"helper","task":"What is 6*7?"}`})
	if err == nil {
		t.Fatal("a cancelled call answered")
	}
	child, err := n.log.Read(context.Background(), "boss.sub4", 1)
	if err != nil || len(child) == 0 {
		t.Fatalf("the child: %d events, %v", len(child), err)
	}
	last := child[len(child)-1]
	p, err := last.Decode()
	if f, ok := p.(*messages.TaskFailed); err != nil || !ok || f.Reason != messages.ReasonCancelled {
		t.Fatalf("the child's last event once the cancelled call returned: %s %s", last.Type, last.Payload)
	}
}

// A child's answer past MaxDelegateResult is cut, within the bound, on a
// character's edge, with a note naming its size and the child session.
func TestDelegateResultIsCut(t *testing.T) {
	if got := cutResult("short", "c", MaxDelegateResult); got != "short" {
		t.Errorf("a short answer: %q", got)
	}
	long := strings.Repeat("é", MaxDelegateResult) // 2 bytes each
	got := cutResult(long, "boss.sub4", MaxDelegateResult)
	if len(got) > MaxDelegateResult || !strings.HasPrefix(got, "éé") ||
		!strings.Contains(got, "[cut: the sub-agent's answer is 16384 bytes, more than 8192; the whole of it is the result of child session boss.sub4]") {
		t.Errorf("cut to %d bytes: ...%q", len(got), got[len(got)-200:])
	}
	if head, _, _ := strings.Cut(got, "\n[cut:"); strings.Count(head, "é")*2 != len(head) {
		t.Errorf("the head is cut inside a character")
	}
}

// A team member's answer past its bound is cut in its middle: its head (cut on a
// character's edge), the note on a line of its own, and the lines that close it
// with directives for the team, whole, so the team reads the same directives from
// it (actors.TeamDirectivesAt finds the same lines); at most the bound.
func TestMemberAnswerIsCutInItsMiddle(t *testing.T) {
	const bound = 1 << 10
	closing := "STATE: city = Zürich\n\nSTATE: note = ünïcode €\nHANDOFF: checker: look at it\n\n"
	directives := func(s string) string { return s[actors.TeamDirectivesAt(s):] }
	for pad := range 3 { // the head's cut falls on each byte of a 3-byte character
		out := strings.Repeat("x", pad) + strings.Repeat("€", bound) + "\nlast line of text\n" + closing
		got := answerBound{bytes: bound, team: true}.cut(out, "team.sub2")
		head, rest, ok := strings.Cut(got, "\n[cut: the sub-agent's answer is ")
		if !ok || len(got) > bound || !utf8.ValidString(got) || directives(got) != closing || !strings.HasSuffix(rest, "]\n"+closing) {
			t.Fatalf("pad %d: cut to %d bytes, valid %v: …%q", pad, len(got), utf8.ValidString(got), got[max(len(got)-400, 0):])
		}
		if strings.TrimLeft(head, "x") != strings.Repeat("€", (len(head)-pad)/3) || len(head)+len(closing) < bound-300 {
			t.Errorf("pad %d: the head (%d bytes) is cut inside a character, or short", pad, len(head))
		}
		if !strings.Contains(rest, fmt.Sprintf("%d bytes, more than %d: its middle is cut here", len(out), bound)) {
			t.Errorf("pad %d: the note: %q", pad, rest[:200])
		}
	}
	// Within the bound, or for an agent's own call: as before.
	if got := (answerBound{bytes: bound, team: true}).cut(closing, "c"); got != closing {
		t.Errorf("a short answer: %q", got)
	}
	long := strings.Repeat("é", bound) + "\n" + closing
	if got := (answerBound{bytes: bound}).cut(long, "c"); got != cutResult(long, "c", bound) {
		t.Errorf("an agent's own call's answer is not cut at its end")
	}
	// An answer that closes with no directive: its head and the note, as before.
	plain := strings.Repeat("é", bound) + "\nSTATE: quoted = 1\nthe end\n\n"
	if got := (answerBound{bytes: bound, team: true}).cut(plain, "c"); got != cutResult(plain, "c", bound) {
		t.Errorf("an answer without directives: …%q", got[len(got)-200:])
	}
	// Directives larger than the bound: their trailing blanks dropped, then their
	// first lines; the last ones that fit kept whole, the HANDOFF line among them.
	var many strings.Builder
	for i := range 100 {
		fmt.Fprintf(&many, "STATE: k%d = %s\n", i, strings.Repeat("v", 20))
	}
	many.WriteString("HANDOFF: checker: go\n" + strings.Repeat("\n", 2*bound))
	out := "text\n" + many.String()
	got := answerBound{bytes: bound, team: true}.cut(out, "c")
	kept := directives(got)
	if len(got) > bound || !strings.Contains(got, "\n[cut: ") || !strings.HasSuffix(kept, "STATE: k99 = "+strings.Repeat("v", 20)+"\nHANDOFF: checker: go") ||
		!strings.HasPrefix(kept, "STATE: k") || !strings.HasSuffix(many.String()[:strings.Index(many.String(), "HANDOFF")], kept[:strings.Index(kept, "HANDOFF")]) ||
		len(kept) < bound-300 {
		t.Errorf("directives past the bound: %d bytes, kept %d: %q…%q", len(got), len(kept), got[:min(len(got), 300)], kept[max(len(kept)-100, 0):])
	}
	// A last directive line larger than the bound alone: its head and the note.
	huge := "text\nSTATE: big = " + strings.Repeat("v", 2*bound)
	if got := (answerBound{bytes: bound, team: true}).cut(huge, "c"); got != cutResult(huge, "c", bound) {
		t.Errorf("a directive line past the bound: …%q", got[len(got)-200:])
	}
}

// Child session IDs follow the session ID rule however long the parent's is.
func TestChildSessionID(t *testing.T) {
	if got := ChildSessionID(messages.EffectKey{SessionID: "boss", Seq: 4}); got != "boss.sub4" {
		t.Errorf("ChildSessionID(boss/4) = %q", got)
	}
	long := strings.Repeat("a", 128)
	got := ChildSessionID(messages.EffectKey{SessionID: long, Seq: 12})
	if !ValidSessionID(got) || !strings.HasPrefix(got, "sub.") || got == ChildSessionID(messages.EffectKey{SessionID: long, Seq: 13}) {
		t.Errorf("ChildSessionID of a long parent: %q", got)
	}
}

// heldReads is an event log whose reads of one session wait until the test
// releases them (or their context ends).
type heldReads struct {
	*sqlite.Log
	session string
	release chan struct{}
}

func (l *heldReads) Read(ctx context.Context, sessionID string, fromSeq uint64) ([]messages.Envelope, error) {
	if sessionID == l.session {
		select {
		case <-l.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return l.Log.Read(ctx, sessionID, fromSeq)
}

// With every delegate call slot of the node taken, a parent cancelled while its
// delegate call waits in the node's queue (whose cancellation answers the call
// without running the tool) cancels the child that an earlier performance of the
// call started (on a node that died, say): the child does not run on for its 30
// minutes, its model paid for nobody.
func TestDelegateCallCancelledInTheQueueCancelsItsChild(t *testing.T) {
	base, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	// A bound the fillers can take (the node's has none in effect).
	defer func(c int) { delegateConcurrency = c }(delegateConcurrency)
	delegateConcurrency = 64
	log := &heldReads{Log: base, session: "filler", release: make(chan struct{})}
	model := &heldModel{release: make(chan struct{})}
	t.Cleanup(func() { close(model.release) })
	n, err := New(context.Background(), Config{DataDir: t.TempDir(), Log: log, Model: model, Agents: []NamedAgent{
		{Name: "lead", Tools: []string{DelegateTool}},
		{Name: "helper", Tools: []string{"calculator"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := n.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	t.Cleanup(func() { close(log.release) }) // before stop: the fillers end
	// delegateConcurrency calls that wait (each reads its parent's log, held), and
	// take every slot of the node's delegate calls.
	for i := range delegateConcurrency {
		key := messages.EffectKey{SessionID: "filler", Seq: uint64(i + 1)}
		n.local.Perform(messages.EffectRequest{SessionID: key.SessionID, Key: key, Tool: &messages.ToolCallRequested{
			Key: key.String(), Tool: DelegateTool, Arguments: `{"agent":"helper","task":"wait"}`}}, func(messages.EffectReply) {})
	}
	if _, err := n.Submit(context.Background(), Task{Input: "go", SessionID: "boss", Agent: "lead"}); err != nil {
		t.Fatal(err)
	}
	var requested bool
	for deadline := time.Now().Add(10 * time.Second); !requested; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the lead's delegate call was never requested")
		}
		events, _ := n.log.Read(context.Background(), "boss", 1)
		for _, e := range events {
			requested = requested || (e.Type == messages.TypeToolCallRequested && e.Seq == 4)
		}
	}
	// The call's earlier performance, which started the child (and then its node
	// died: it cancels nothing).
	earlier, died := context.WithCancelCause(tools.WithCallKey(context.Background(), "boss/4"))
	defer died(errors.New("the node died"))
	go func() { _, _ = n.delegate(earlier, delegateArgs{Agent: "helper", Task: "What is 6*7?"}) }()
	for deadline := time.Now().Add(10 * time.Second); model.helper.Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the child's model was never called")
		}
	}
	if err := n.Cancel(context.Background(), "boss", "enough"); err != nil {
		t.Fatal(err)
	}
	var last messages.Envelope
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		child, err := n.log.Read(context.Background(), "boss.sub4", 1)
		if err != nil {
			t.Fatal(err)
		}
		last = child[len(child)-1]
		if last.Type == messages.TypeTaskFailed || last.Type == messages.TypeTaskCompleted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the child still runs after its parent was cancelled: its last event is %s", last.Type)
		}
	}
	p, err := last.Decode()
	if f, ok := p.(*messages.TaskFailed); err != nil || !ok || f.Reason != messages.ReasonCancelled {
		t.Fatalf("the child's end: %s %s", last.Type, last.Payload)
	}
}
