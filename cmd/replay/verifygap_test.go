package main

import (
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
)

// verify of a session whose log lost an event (deleted by hand here) names the
// seq missing and re-decides nothing: it reported the agent's divergence at the
// next event ("now: nothing (the agent waits)"), as if a change of the code had
// made it wait for the result the log lost.
func TestVerifyOfALogThatLacksAnEventNamesIt(t *testing.T) {
	dir := t.TempDir()
	id := recordSession(t, dir, "What is 12 * (7 + 5)?") // 8 events: seq 5 is the calculator's result
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "events.db"))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`DELETE FROM events WHERE session_id = ? AND seq = 5`, `DELETE FROM events WHERE session_id = ? AND seq IN (2, 3)`} {
		if _, err := db.Exec(q, id); err != nil {
			t.Fatal(err)
		}
		code, out, errs := replay(t, "verify", id, "--data", dir)
		want := "the log lacks seq 5 (its next event is seq 6)"
		if strings.Contains(q, "IN") {
			want = "the log lacks seqs 2 to 3 (its next event is seq 4)"
		}
		if code != 1 || !strings.Contains(errs, want) || strings.Contains(out, "diverges") {
			t.Errorf("%s: verify: exit %d\n%s%s", q, code, out, errs)
		}
	}
	db.Close()
}
