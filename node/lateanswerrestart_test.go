package node_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// blindLog is a log whose reads of the sessions blind picks fail once on is set:
// a node on it cannot see those sessions end.
type blindLog struct {
	eventlog.Log
	blind func(sessionID string) bool
	on    atomic.Bool
}

func (l *blindLog) Read(ctx context.Context, sessionID string, fromSeq uint64) ([]messages.Envelope, error) {
	if l.on.Load() && l.blind(sessionID) {
		return nil, errors.New("blind")
	}
	return l.Log.Read(ctx, sessionID, fromSeq)
}

// startOn starts a node of cfg on log, and returns its stop.
func startOn(t *testing.T, log eventlog.Log, cfg node.Config) (*node.Node, func()) {
	t.Helper()
	cfg.Log, cfg.DataDir = log, t.TempDir()
	n, stop := nodetest.StartWithStop(t, cfg)
	return n, stop
}

// lateAnswers returns the late answers of the delegate call key among a
// session's events: its tool.completed events after its task's end.
func lateAnswers(t *testing.T, events []messages.Envelope, key string) []*messages.ToolCallCompleted {
	t.Helper()
	var out []*messages.ToolCallCompleted
	ended := false
	for _, e := range events {
		ended = ended || e.Type == messages.TypeTaskFailed
		if c, ok := decodeAs[*messages.ToolCallCompleted](t, e); ok && ended && c.Key == key {
			out = append(out, c)
		}
	}
	return out
}

func decodeAs[P messages.Payload](t *testing.T, e messages.Envelope) (P, bool) {
	t.Helper()
	var zero P
	p, err := e.Decode()
	if err != nil {
		t.Fatal(err)
	}
	v, ok := p.(P)
	if !ok {
		return zero, false
	}
	return v, true
}

// A node that closes after a parent's task failed and its child ended, but
// before it recorded the child's end on the parent's task (here it cannot see the
// child's log end), leaves the late answer to the next node started on the log:
// that node folds the parent's log as it wakes the failed parents of recent
// children, waits for the child again, and records the child's spend on the
// parent's task, once: a third node records nothing more.
func TestDelegateLateAnswerIsRecordedAfterARestart(t *testing.T) {
	model, log, key, childEnd := failedParentMissingItsChildsEnd(t)

	_, stop2 := startOn(t, log, subagentsConfig(model))
	waitFor(t, 10*time.Second, "the child's end recorded on its parent's task after the restart", func() bool {
		return len(lateAnswers(t, readAll(t, log, "boss"), key)) > 0
	})
	stop2()
	_, stop3 := startOn(t, log, subagentsConfig(model))
	stop3()

	boss := readAll(t, log, "boss")
	late := lateAnswers(t, boss, key)
	spent := childEnd.Usage.Add(childEnd.SubAgentsUsage)
	if len(late) != 1 || late[0].Usage != spent || late[0].Error == "" {
		t.Fatalf("the late answers of the call: %+v, want one with the child's spend %+v", late, spent)
	}
	st := actors.NewSessionState("boss")
	for _, e := range boss {
		if err := st.Apply(e); err != nil {
			t.Fatal(err)
		}
	}
	if got := st.TaskSubAgentsUsage(boss[0].ID); got != spent {
		t.Errorf("the parent's task counts %+v of its sub-agents', want the child's %+v", got, spent)
	}
	if len(st.LateCalls()) != 0 {
		t.Errorf("calls still waiting for their late answers: %v", st.LateCalls())
	}
	agents, err := subagentsConfig(model).AllAgents()
	if err != nil {
		t.Fatal(err)
	}
	if div, err := actors.VerifyAmong(agents, boss); err != nil || div != nil {
		t.Fatalf("replay verify of the parent: %v %v", div, err)
	}
}

// failedParentMissingItsChildsEnd leaves, on a new log, a parent's task (session
// boss) failed by a cancel while its child (boss.sub4) was held in its second
// call, and the child's end not recorded on the parent's task: the node, which
// could not see the child's log end, is stopped. It returns the model, the log,
// the key of the parent's delegate call and the child's end.
func failedParentMissingItsChildsEnd(t *testing.T) (*byAgent, eventlog.Log, string, *messages.TaskFailed) {
	t.Helper()
	model := heldHelperModel(t, map[string][]llm.ScriptStep{
		"lead": {{ToolCalls: delegateCall("d1", "helper", "6*7").ToolCalls, Usage: promptTokens(100)}, {Content: "done"}},
	})
	log := openLog(t)
	blind := &blindLog{Log: log, blind: func(id string) bool { return id == "boss.sub4" }}
	n1, stop1 := startOn(t, blind, subagentsConfig(model))
	if _, err := n1.Submit(context.Background(), node.Task{Input: "go", SessionID: "boss", Agent: "lead", MaxTokens: 5000}); err != nil {
		stop1()
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the child's second call", func() bool { return model.callsOf("helper") >= 2 })
	blind.on.Store(true)
	if err := n1.Cancel(context.Background(), "boss", "enough"); err != nil {
		stop1()
		t.Fatal(err)
	}
	var f []*messages.TaskFailed
	waitFor(t, 10*time.Second, "the child's end", func() bool {
		f = payloads[*messages.TaskFailed](t, readAll(t, log, "boss.sub4"))
		return len(f) > 0
	})
	stop1()
	boss := readAll(t, log, "boss")
	key := payloads[*messages.ToolCallRequested](t, boss)[0].Key
	if got := lateAnswers(t, boss, key); len(got) != 0 {
		t.Fatalf("the first node recorded the late answer %+v, which it could not see", got[0])
	}
	return model, log, key, f[0]
}

// The same with a grandchild: lead delegates to mid, which delegates to helper,
// and the node closes after the three failed (cancelled), neither child's end
// recorded on its parent. The next node wakes both failed parents: mid's wait
// records the grandchild's spend on mid's task, and lead's, which waits for mid's
// figures to be complete, then records mid's spend and the grandchild's on
// lead's task.
func TestDelegateLateAnswersOfAGrandchildAreRecordedAfterARestart(t *testing.T) {
	model := heldHelperModel(t, map[string][]llm.ScriptStep{
		"lead": {{ToolCalls: delegateCall("d1", "mid", "ask helper").ToolCalls, Usage: promptTokens(100)}, {Content: "done"}},
		"mid":  {{ToolCalls: delegateCall("m1", "helper", "6*7").ToolCalls, Usage: promptTokens(20)}, {Content: "42"}},
	})
	config := func() node.Config {
		cfg := subagentsConfig(model)
		cfg.Agents = append(cfg.Agents, node.NamedAgent{Name: "mid", Description: "asks", SystemPrompt: "You ask.", Tools: []string{node.DelegateTool}})
		return cfg
	}
	log := openLog(t)
	blind := &blindLog{Log: log, blind: func(id string) bool { return strings.HasPrefix(id, "boss.") }}
	n1, stop1 := startOn(t, blind, config())
	if _, err := n1.Submit(context.Background(), node.Task{Input: "go", SessionID: "boss", Agent: "lead", MaxTokens: 5000}); err != nil {
		stop1()
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the grandchild's second call", func() bool { return model.callsOf("helper") >= 2 })
	blind.on.Store(true)
	if err := n1.Cancel(context.Background(), "boss", "enough"); err != nil {
		stop1()
		t.Fatal(err)
	}
	midKey := payloads[*messages.ToolCallRequested](t, readAll(t, log, "boss"))[0].Key
	k, err := messages.ParseEffectKey(midKey)
	if err != nil {
		t.Fatal(err)
	}
	midID := node.ChildSessionID(k)
	grandKey := payloads[*messages.ToolCallRequested](t, readAll(t, log, midID))[0].Key
	k, err = messages.ParseEffectKey(grandKey)
	if err != nil {
		t.Fatal(err)
	}
	grandID := node.ChildSessionID(k)
	var gf, mf []*messages.TaskFailed
	waitFor(t, 10*time.Second, "the children's ends", func() bool {
		gf = payloads[*messages.TaskFailed](t, readAll(t, log, grandID))
		mf = payloads[*messages.TaskFailed](t, readAll(t, log, midID))
		return len(gf) > 0 && len(mf) > 0
	})
	stop1()
	if got := lateAnswers(t, readAll(t, log, midID), grandKey); len(got) != 0 {
		t.Fatalf("the first node recorded the late answer %+v, which it could not see", got[0])
	}

	_, stop2 := startOn(t, log, config())
	waitFor(t, 10*time.Second, "the child's end recorded on the root's task after the restart", func() bool {
		return len(lateAnswers(t, readAll(t, log, "boss"), midKey)) > 0
	})
	stop2()
	grandSpent := gf[0].Usage.Add(gf[0].SubAgentsUsage)
	if late := lateAnswers(t, readAll(t, log, midID), grandKey); len(late) != 1 || late[0].Usage != grandSpent {
		t.Fatalf("the late answers on mid's task: %+v, want one with the grandchild's spend %+v", late, grandSpent)
	}
	want := mf[0].Usage.Add(grandSpent)
	if late := lateAnswers(t, readAll(t, log, "boss"), midKey); len(late) != 1 || late[0].Usage != want {
		t.Fatalf("the late answers on the root's task: %+v, want one with mid's and the grandchild's spend %+v", late, want)
	}
}
