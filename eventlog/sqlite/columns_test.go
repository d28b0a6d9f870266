package sqlite_test

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
)

// An insert binds a row's texts and payload as one blob that the statement cuts
// (insertQuery): every column must still hold the value, and the storage class,
// that binding it alone stored, TEXT for the texts and BLOB for the payload,
// whether the row went in with others or alone (a batch written again an event at
// a time), with texts that are empty or not ASCII.
func TestInsertStoresEachColumnAsItsOwnValue(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	lg := open(t, sqlite.Config{Dir: dir})
	const session = "séance-✓"
	ev := func(seq uint64, cause, corr, actor, payload string) messages.Envelope {
		return messages.Envelope{ID: fmt.Sprintf("%s/%d", session, seq), SessionID: session, Seq: seq, Type: messages.TypeTaskSubmitted,
			Version: 1, CausationID: cause, CorrelationID: corr, TS: int64(1_000_000 + seq), Actor: actor, Payload: json.RawMessage(payload)}
	}
	batch := []messages.Envelope{
		ev(1, "", "", "session", `{"input":"ü"}`),
		ev(2, session+"/1", "tâche/1", "modèle", `{"a":1}`),
		ev(3, session+"/2", "tâche/1", "", `{}`),
	}
	if err := lg.Append(ctx, batch); err != nil {
		t.Fatal(err)
	}
	// The third again (stored already: at-least-once) with a fourth: the batch is
	// written again an event at a time, and the fourth goes in alone.
	batch = append(batch, ev(4, session+"/3", "", "outil ✓", `{"b":"<&>"}`))
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
