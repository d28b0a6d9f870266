package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
)

// show gives each stream of the log the status list gives it: a configuration's
// stream (config/<digest>) is no session, and show said it was running.
func TestShowGivesAStreamTheStatusListGives(t *testing.T) {
	dir := t.TempDir()
	recordSession(t, dir, "What is 12 * (7 + 5)?")
	code, out, errs := replay(t, "list", "--data", dir, "--json")
	var infos []eventlog.SessionInfo
	if code != 0 || json.Unmarshal([]byte(out), &infos) != nil {
		t.Fatalf("list: %d %s %s", code, out, errs)
	}
	kinds := map[string]bool{}
	for _, s := range infos {
		kinds[s.Status] = true
		code, out, errs := replay(t, "show", s.ID, "--data", dir)
		head, _, _ := strings.Cut(out, "\n")
		if code != 0 || !strings.Contains(head, "  "+s.Status+"  ") {
			t.Errorf("show %s: %q, where list says %s (%d %s)", s.ID, head, s.Status, code, errs)
		}
		code, out, _ = replay(t, "show", s.ID, "--data", dir, "--json")
		var tl Timeline
		if code != 0 || json.Unmarshal([]byte(out), &tl) != nil || tl.Status != s.Status {
			t.Errorf("show %s --json: status %q, where list says %s", s.ID, tl.Status, s.Status)
		}
	}
	if !kinds["config"] || !kinds["completed"] {
		t.Fatalf("the log has no configuration's stream and session to show: %v", kinds)
	}
}
