package sqlite_test

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
)

// An insert binds a row's texts and payload as one blob that the statement cuts
// (insertQuery): every column must still hold the value, and the storage class,
// that binding it alone stored, TEXT for the texts and BLOB for the payload,
// whether the row went in with others or alone (a batch written again an event at
// a time), with texts that are empty or not ASCII, and payloads small or large.
func TestInsertStoresEachColumnAsItsOwnValue(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	lg := open(t, sqlite.Config{Dir: dir})
	const session = "séance-✓"
	ev := func(seq uint64, cause, corr, actor, payload string) messages.Envelope {
		return messages.Envelope{ID: fmt.Sprintf("%s/%d", session, seq), SessionID: session, Seq: seq, Type: messages.TypeTaskSubmitted,
			Version: 1, CausationID: cause, CorrelationID: corr, TS: int64(1_000_000 + seq), Actor: actor, Payload: json.RawMessage(payload)}
	}
	// Payloads small and large (bound with the texts, and alone), beside actors
	// empty or not.
	large := `{"l":"` + strings.Repeat("é", 3<<10) + `"}`
	batch := []messages.Envelope{
		ev(1, "", "", "session", `{"input":"ü"}`),
		ev(2, session+"/1", "tâche/1", "modèle", large),
		ev(3, session+"/2", "tâche/1", "", `{}`),
		ev(4, session+"/3", "tâche/1", "", large),
	}
	if err := lg.Append(ctx, batch); err != nil {
		t.Fatal(err)
	}
	// The third and fourth again (stored already: at-least-once) with two more:
	// the batch is written again an event at a time, and the new ones go in alone.
	batch = append(batch, ev(5, session+"/4", "", "outil ✓", `{"b":"<&>"}`), ev(6, session+"/5", "", "outil ✓", large))
	if err := lg.Append(ctx, batch[2:]); err != nil {
		t.Fatal(err)
	}
	if err := lg.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", filepath.Join(dir, "events.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT session_id, seq, id, type, version, causation_id, correlation_id, ts, actor, payload,
		typeof(session_id) || typeof(id) || typeof(type) || typeof(causation_id) || typeof(correlation_id) || typeof(actor) || typeof(payload)
		FROM events WHERE session_id = ? ORDER BY seq`, session)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var got messages.Envelope
		var typ string
		var payload []byte
		if err := rows.Scan(&got.SessionID, &got.Seq, &got.ID, &got.Type, &got.Version, &got.CausationID, &got.CorrelationID,
			&got.TS, &got.Actor, &payload, &typ); err != nil {
			t.Fatal(err)
		}
		got.Payload = payload
		want := batch[n]
		if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
			t.Errorf("row %d = %+v; want %+v", n+1, got, want)
		}
		if typ != "texttexttexttexttexttextblob" {
			t.Errorf("row %d's storage classes: %s; want text for the six texts and blob for the payload", n+1, typ)
		}
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != len(batch) {
		t.Fatalf("%d rows stored; want %d", n, len(batch))
	}
}

// An insert binds a row's payload as it came, not copied into the blob of its
// texts: a large payload costs the writer no copy of it on the heap (and SQLite
// no substr of it), as when each column was bound alone.
func TestInsertDoesNotCopyALargePayload(t *testing.T) {
	ctx := testCtx(t)
	lg := open(t, sqlite.Config{Dir: t.TempDir()})
	const size = 4 << 20
	payload := json.RawMessage(`"` + strings.Repeat("p", size) + `"`)
	ev := func(seq uint64, p json.RawMessage) messages.Envelope {
		return messages.Envelope{ID: fmt.Sprintf("large/%d", seq), SessionID: "large", Seq: seq, Type: messages.TypeTaskSubmitted,
			Version: 1, TS: int64(seq), Actor: "session", Payload: p}
	}
	if err := lg.Append(ctx, []messages.Envelope{ev(1, json.RawMessage(`{}`))}); err != nil { // the statements prepared
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	// Alone, then two in one statement.
	if err := lg.Append(ctx, []messages.Envelope{ev(2, payload)}); err != nil {
		t.Fatal(err)
	}
	if err := lg.Append(ctx, []messages.Envelope{ev(3, payload), ev(4, payload)}); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > size/2 {
		t.Errorf("appending three payloads of %d bytes allocated %d bytes on the heap; want less than one payload", len(payload), got)
	}
	got, err := lg.Read(ctx, "large", 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("read %d events; want 3", len(got))
	}
	for _, e := range got {
		if !bytes.Equal(e.Payload, payload) {
			t.Errorf("event %d's payload: %d bytes, not the one appended", e.Seq, len(e.Payload))
		}
	}
}
