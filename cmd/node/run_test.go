package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// unfinishedSession records, in the log of dir, a session whose task was submitted
// and whose first model call was requested but never answered, as a node killed
// mid-call leaves it: whoever resumes it calls the model next.
func unfinishedSession(t *testing.T, dir, id string) []messages.Envelope {
	t.Helper()
	ctx := context.Background()
	lg, err := sqlite.Open(ctx, sqlite.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	var events []messages.Envelope
	for _, p := range []messages.Payload{
		&messages.TaskSubmitted{Input: "the other session's task"},
		&messages.ModelRequested{Key: id + "/2", Model: "offline", Step: 1, Messages: 2},
	} {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		seq := uint64(len(events) + 1)
		e.ID, e.SessionID, e.Seq, e.TS, e.Actor = fmt.Sprintf("%s/%d", id, seq), id, seq, time.Now().UnixMicro(), "session"
		if seq > 1 {
			e.CausationID, e.CorrelationID = events[0].ID, events[0].ID
		}
		events = append(events, e)
	}
	if err := lg.Append(ctx, events); err != nil {
		t.Fatal(err)
	}
	if err := lg.Close(); err != nil {
		t.Fatal(err)
	}
	return events
}

func readSession(t *testing.T, dir, id string) []messages.Envelope {
	t.Helper()
	lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: dir, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	events, err := lg.Read(context.Background(), id, 1)
	if err != nil {
		t.Fatal(err)
	}
	return events
}

// `node run` runs its own task and nothing else: another session left unfinished in
// the data directory is neither resumed (its model call is not issued again, at the
// user's cost) nor changed, and a node that serves the directory resumes it later.
func TestRunResumesOnlyItsOwnSession(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	modelLog := filepath.Join(dir, "model.txt")
	before := unfinishedSession(t, data, "other")

	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"run", "--data", data, "--model", "offline", "echo mine"}, &out, &errb, options{
		wrapModel: func(m llm.Model) llm.Model { return &loggedModel{Model: m, path: modelLog} },
	})
	if code != 0 || !strings.Contains(out.String(), "answer: mine") {
		t.Fatalf("run: %d\n%s\n%s", code, out.String(), errb.String())
	}
	calls := countLines(t, modelLog, "")
	if len(calls) == 0 {
		t.Fatal("the run's own task called no model: the model log proves nothing")
	}
	for key := range calls {
		if !strings.HasPrefix(key, "cli-") {
			t.Errorf("node run called the model for %q, not its own session", key)
		}
	}
	after := readSession(t, data, "other")
	if len(after) != len(before) {
		t.Fatalf("node run changed the other session: %d events, had %d", len(after), len(before))
	}

	// The other session is still unfinished, and a serving node resumes it.
	lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: data, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	running, err := lg.Sessions(context.Background(), eventlog.Filter{Status: messages.StatusRunning, SessionsOnly: true})
	lg.Close()
	if err != nil || len(running) != 1 || running[0].ID != "other" {
		t.Fatalf("unfinished sessions after node run = %+v, %v; want only other", running, err)
	}
	n, err := node.New(context.Background(), node.Config{DataDir: data})
	if err != nil {
		t.Fatal(err)
	}
	live, stopWatch := n.Watch("other")
	defer stopWatch()
	stop, err := n.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	timeout := time.After(10 * time.Second)
	for done := false; !done; {
		select {
		case e := <-live:
			done = e.Type == messages.TypeTaskCompleted
		case <-timeout:
			t.Fatal("a serving node did not resume the other session to its end in 10 s")
		}
	}
}

// Input is checked before anything starts: an empty task prints nothing on stdout
// (no session ID of a session that never exists), says why, exits 2 and records nothing.
func TestRunRejectsEmptyInputFirst(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"run", "--data", data, "--model", "offline", ""}, &out, &errb, options{})
	if code != 2 || out.Len() != 0 || !strings.Contains(errb.String(), "input is required") {
		t.Fatalf("run with an empty task = %d, stdout %q, stderr %q; want 2, nothing, the reason", code, out.String(), errb.String())
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Fatalf("run with an empty task created its data directory: %v", err)
	}
}

// The task and the model's words reach the terminal with their control characters
// escaped: a task cannot clear the screen, retitle the window or reorder the line.
func TestRunEscapesControlsInTaskText(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	const hostile = "echo \x1b[2J\x1b]0;pwned\x07 \rfake\u202egnp.exe \u009b31m\x7f"
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"run", "--data", data, "--model", "offline", hostile}, &out, &errb, options{})
	if code != 0 {
		t.Fatalf("run: %d\n%s\n%s", code, out.String(), errb.String())
	}
	got := out.String()
	for _, raw := range []string{"\x1b", "\x07", "\r", "\u202e", "\u009b", "\x7f"} {
		if strings.Contains(got, raw) {
			t.Errorf("stdout carries the raw control %q:\n%q", raw, got)
		}
	}
	for _, esc := range []string{`\x1b[2J`, `\x1b]0;pwned\a`, `\rfake`, `\u202egnp.exe`, `\u009b31m`, `\x7f`} {
		if !strings.Contains(got, esc) {
			t.Errorf("stdout lacks the escaped %s:\n%s", esc, got)
		}
	}
	// The log keeps the text as it was given.
	events := readSession(t, data, sessionOf(t, got))
	if p, err := events[0].Decode(); err != nil || p.(*messages.TaskSubmitted).Input != hostile {
		t.Fatalf("recorded task = %v, %v; want the input byte for byte", p, err)
	}
}

// sessionOf returns the session ID from the last line of `node run`'s output.
func sessionOf(t *testing.T, out string) string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	id, ok := strings.CutPrefix(lines[len(lines)-1], "session ")
	if !ok {
		t.Fatalf("no session line at the end of:\n%s", out)
	}
	return id
}
