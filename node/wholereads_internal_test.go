package node

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// readHooked counts the events read, and tells reads on to reads when set.
type readHooked struct {
	readCounted
	reads chan string
}

func (l *readHooked) Read(ctx context.Context, session string, from uint64) ([]messages.Envelope, error) {
	events, err := l.readCounted.Read(ctx, session, from)
	if l.reads != nil {
		l.reads <- session
	}
	return events, err
}

func hooked(lg eventlog.Log) *readHooked {
	return &readHooked{readCounted: readCounted{Log: lg}}
}

// A delegate call waiting for a long child's end reads its log on from the last
// event it read at each poll (childEnd), not the child's whole history each
// time, and answers as a read of the whole history does.
func TestDelegateAwaitReadsTheChildOnFromItsLastRead(t *testing.T) {
	ctx := context.Background()
	lg := openLog(t)
	w := newHistoryWriter(t, lg, "boss.sub1")
	w.add("session", &messages.TaskSubmitted{Input: "a long sub-task"})
	task := w.task
	for s := 1; s <= 300; s++ {
		for _, k := range w.step(s, "echo") {
			w.complete(k, "echo")
		}
	}
	w.flush()
	whole := w.seq
	log := hooked(lg)
	log.reads = make(chan string, 16)
	n := &Node{cfg: Config{Logger: slog.New(slog.DiscardHandler)}, log: log}
	type answer struct {
		out string
		err error
	}
	done := make(chan answer, 1)
	go func() {
		out, err := n.awaitChild(ctx, "worker", "boss.sub1", task, answerBound{bytes: MaxDelegateResult}, nil)
		done <- answer{out, err}
	}()
	for range 3 { // the polls at 0, 250 ms and 750 ms
		<-log.reads
	}
	w.step(301, "echo")
	w.add("session", &messages.TaskCompleted{Output: "the sub-task's answer", Steps: 301, Usage: messages.Usage{PromptTokens: 7}})
	w.flush()
	var got answer
	for got.out == "" && got.err == nil {
		select {
		case <-log.reads:
		case got = <-done:
		}
	}
	if read := log.events.Load(); read >= 2*int64(whole) {
		t.Fatalf("the wait read %d events of a child of %d (and 4 more) over 4 polls: its whole history at each", read, whole)
	}
	// A wait that reads the child's whole history once answers the same.
	fresh := &Node{cfg: n.cfg, log: lg}
	want, err := fresh.awaitChild(ctx, "worker", "boss.sub1", task, answerBound{bytes: MaxDelegateResult}, nil)
	if got.out != want || (got.err == nil) != (err == nil) {
		t.Fatalf("answered %q, %v; a whole read answers %q, %v", got.out, got.err, want, err)
	}
}

// The task tasks/cancel finds running in an A2A context (a2aBackend.RunningTask)
// is the session's kept fold's: after its first read, a read of a long session
// folds only the events since, and it says what a2a.RunningTask says of the
// session's whole history, a task queued behind the running one, one failed
// while queued, and none running among them.
func TestA2ARunningTaskReadsOnlyTheTail(t *testing.T) {
	ctx := context.Background()
	lg := openLog(t)
	log := hooked(lg)
	w := newHistoryWriter(t, lg, "ctx")
	w.tasks(200, 3) // 2,800 events
	b := a2aBackend{&Node{cfg: Config{Logger: slog.New(slog.DiscardHandler)}, log: log}}
	check := func(what string) {
		t.Helper()
		got, err := b.RunningTask(ctx, "ctx")
		if err != nil {
			t.Fatal(err)
		}
		events, err := lg.Read(ctx, "ctx", 1)
		if err != nil {
			t.Fatal(err)
		}
		if want := a2a.RunningTask(events); got != want {
			t.Fatalf("%s: running %q, the whole history says %q", what, got, want)
		}
	}
	check("all ended")
	w.add("session", &messages.TaskSubmitted{Input: "runs"})
	running := w.task
	w.step(1, "echo")
	w.add("session", &messages.TaskSubmitted{Input: "queued, fails"})
	queued := w.task
	w.add("session", &messages.TaskSubmitted{Input: "queued"})
	w.flush()
	log.events.Store(0)
	check("one runs, two queued")
	w.task = queued
	w.add("session", &messages.TaskFailed{Reason: messages.ReasonCancelled, Error: "cancelled while queued"})
	w.task = running
	w.add("session", &messages.TaskCompleted{Output: "done"})
	w.flush()
	check("the first ended, the second failed queued: the third runs")
	if read := log.events.Load(); read > 2*feedVerify+8 {
		t.Fatalf("two reads of the running task read %d events of the session's %d", read, w.seq)
	}
	if got, err := b.RunningTask(ctx, "none"); err != nil || got != "" {
		t.Fatalf("a session without events: %q, %v, want none running", got, err)
	}
}

// A delegate call of a long session reads the parent's events from its task's
// task.submitted on (parentEvents: the task the session's kept fold says runs),
// not the session's whole history at each call, and decides from them as from
// the whole history: the same task, the same sub-agents counted, the same budget.
func TestDelegateReadsTheParentFromItsTask(t *testing.T) {
	ctx := context.Background()
	lg := openLog(t)
	log := hooked(lg)
	w := newHistoryWriter(t, lg, "boss")
	w.tasks(200, 3) // 2,800 events
	w.add("session", &messages.TaskSubmitted{Input: "delegate", MaxTokens: 4000})
	w.step(1, "echo")
	keys := w.step(2, DelegateTool, DelegateTool, DelegateTool)
	w.flush()
	cfg := Config{Logger: slog.New(slog.DiscardHandler), MaxSubAgents: 2}
	n := &Node{cfg: cfg, log: log}
	whole := &Node{cfg: cfg, log: lg}
	for i, k := range keys {
		key, err := messages.ParseEffectKey(k)
		if err != nil {
			t.Fatal(err)
		}
		log.events.Store(0)
		task, events, err := n.parentTask(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if read := log.events.Load(); i > 0 && read > 2*feedVerify+16 {
			t.Fatalf("call %d: read %d events of the parent's %d", i, read, w.seq)
		}
		wantTask, all, err := whole.parentTask(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(*task) != fmt.Sprint(*wantTask) {
			t.Fatalf("call %d: task %+v, the whole history's %+v", i, *task, *wantTask)
		}
		got, want := fmt.Sprint(n.checkSubAgents(events, key, "")), fmt.Sprint(whole.checkSubAgents(all, key, ""))
		if got != want || (i == 2) != (got != "<nil>") {
			t.Fatalf("call %d: sub-agents check %s, the whole history's %s (the third of 2 allowed refused)", i, got, want)
		}
		gotB, gotErr := n.childBudget(events, key, task, "")
		wantB, wantErr := whole.childBudget(all, key, wantTask, "")
		if gotB != wantB || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
			t.Fatalf("call %d: budget %+v, %v; the whole history's %+v, %v", i, gotB, gotErr, wantB, wantErr)
		}
	}
}

// BenchmarkDelegateParentRead: a delegate call's read of its parent, a session
// of about 28,000 events, from the task the kept fold says runs (fold) and whole
// (as before).
func BenchmarkDelegateParentRead(b *testing.B) {
	ctx := context.Background()
	lg := openLog(b)
	w := newHistoryWriter(b, lg, "boss")
	w.tasks(2000, 3)
	w.add("session", &messages.TaskSubmitted{Input: "delegate"})
	keys := w.step(1, DelegateTool)
	w.flush()
	key, err := messages.ParseEffectKey(keys[0])
	if err != nil {
		b.Fatal(err)
	}
	n := &Node{cfg: Config{Logger: slog.New(slog.DiscardHandler)}, log: lg}
	b.Run("fold", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := n.parentTask(ctx, key); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("whole", func(b *testing.B) {
		for b.Loop() {
			if _, err := lg.Read(ctx, "boss", 1); err != nil {
				b.Fatal(err)
			}
		}
	})
}
