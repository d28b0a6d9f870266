package sqlite

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// The running sessions are listed through the index sessions_running, which holds
// them only, not every stream of the log: a stream that is no session (a
// dashboard sign-in) and an ended session are not in it, and cost the listing
// nothing. The listing is the one the general statement makes.
func TestRunningSessionsAreListedThroughTheirIndex(t *testing.T) {
	ctx := context.Background()
	l := openTemp(ctx, t)
	seq := map[string]uint64{}
	add := func(session string, p messages.Payload) {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		seq[session]++
		e.ID, e.SessionID, e.Seq, e.TS, e.Actor = fmt.Sprintf("%s-%d", session, seq[session]), session, seq[session], int64(1000*len(seq)+int(seq[session])), "session"
		if err := l.Append(ctx, []messages.Envelope{e}); err != nil {
			t.Fatal(err)
		}
	}
	add("running", &messages.TaskSubmitted{Input: "x"})
	add("done", &messages.TaskSubmitted{Input: "x"})
	add("done", &messages.TaskCompleted{Output: "y"})
	add("queued", &messages.TaskSubmitted{Input: "x"})
	add("queued", &messages.TaskCompleted{Output: "y"})
	add("queued", &messages.TaskSubmitted{Input: "again"})
	add("failed", &messages.TaskSubmitted{Input: "x"})
	add("failed", &messages.TaskFailed{Reason: messages.ReasonCancelled})
	for i := range 50 {
		signIn := eventlog.UISignInStreamPrefix + fmt.Sprintf("%064x", i)
		add(signIn, &messages.UISignedIn{TokenMAC: "00", CSRFHash: "00", ExpiresUS: 1})
		add(signIn, &messages.UISignedOut{Reason: "logout"})
	}
	add(eventlog.NotesStreamPrefix+"agent", &messages.UISignedOut{}) // any event: no task.* one

	running, err := l.Sessions(ctx, eventlog.Filter{Status: messages.StatusRunning, SessionsOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	all, err := l.Sessions(ctx, eventlog.Filter{SessionsOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	want := slices.DeleteFunc(all, func(s eventlog.SessionInfo) bool { return s.Status != messages.StatusRunning })
	var ids []string
	for _, s := range running {
		ids = append(ids, s.ID)
	}
	if !slices.Equal(running, want) || strings.Join(ids, " ") != "queued running" {
		t.Fatalf("running sessions %v\nthe general listing's %+v", running, want)
	}

	var entries int
	if err := l.rdb.QueryRowContext(ctx, `SELECT count(*) FROM sessions INDEXED BY sessions_running WHERE `+runningWhere).Scan(&entries); err != nil || entries != 2 {
		t.Fatalf("the index holds %d rows (%v), want the 2 running sessions", entries, err)
	}
	rows, err := l.rdb.QueryContext(ctx, "EXPLAIN QUERY PLAN "+listRunningQuery, 0, 0, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if p := strings.Join(plan, "; "); !strings.Contains(p, "sessions_running") {
		t.Fatalf("the running sessions' listing does not use their index: %s", p)
	}
}
