package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
)

// fork of a stream of the log that is no session (a configuration's, which every
// session's node records; an agent's notes, a memory namespace) is refused as verify
// refuses to verify one: copying its events into a new session made a session that
// began with them.
func TestForkRefusesAStreamThatIsNoSession(t *testing.T) {
	dir := t.TempDir()
	recordSession(t, dir, "What is 12 * (7 + 5)?")
	code, out, errs := replay(t, "list", "--data", dir, "--json")
	var infos []eventlog.SessionInfo
	if code != 0 || json.Unmarshal([]byte(out), &infos) != nil {
		t.Fatalf("list: %d %s %s", code, out, errs)
	}
	stream := ""
	for _, s := range infos {
		if s.Status == "config" {
			stream = s.ID
		}
	}
	if stream == "" {
		t.Fatalf("no configuration's stream in %+v", infos)
	}
	before := readAll(t, dir)
	code, _, errs = replay(t, "fork", stream, "--at", "1", "--session", "from-config", "--input", "What is 2 + 2?", "--model", "offline", "--data", dir)
	if code == 0 || !strings.Contains(errs, "no session") {
		t.Fatalf("fork of %s: %d %s", stream, code, errs)
	}
	if after := readAll(t, dir); len(after) != len(before) {
		t.Fatalf("a refused fork wrote a session: %d streams, had %d", len(after), len(before))
	}
}
