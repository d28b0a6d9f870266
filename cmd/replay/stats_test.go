package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
)

func TestStatsFromTheEmbeddedLog(t *testing.T) {
	dir := t.TempDir()
	recordSession(t, dir, "What is 12 * (7 + 5)?")
	recordSession(t, dir, "what is 1/0")
	recordSession(t, dir, "echo hi")
	code, out, errs := replay(t, "stats", "--data", dir, "--json")
	var s eventlog.Stats
	if code != 0 || json.Unmarshal([]byte(out), &s) != nil {
		t.Fatalf("stats: %d %s %s", code, out, errs)
	}
	if len(s.Models) != 1 || s.Models[0].Model != "offline" || s.Models[0].Agent != "default" || s.Models[0].Calls != 5 || s.Models[0].PromptTokens == 0 {
		t.Fatalf("models: %+v", s.Models)
	}
	if len(s.Tools) != 1 || s.Tools[0].Tool != "calculator" || s.Tools[0].Calls != 2 || s.Tools[0].Errors != 1 || s.Tools[0].ErrorRate != 0.5 {
		t.Fatalf("tools: %+v", s.Tools)
	}
	if len(s.Sessions) != 1 || s.Sessions[0].Sessions != 3 || s.Sessions[0].Completed != 3 || s.Sessions[0].AvgSteps != 5.0/3 {
		t.Fatalf("sessions: %+v", s.Sessions)
	}
	code, out, _ = replay(t, "stats", "--data", dir, "--agent", "other", "--json")
	if code != 0 || json.Unmarshal([]byte(out), &s) != nil || len(s.Models)+len(s.Tools)+len(s.Sessions) != 0 {
		t.Fatalf("agent filter: %s", out)
	}
	code, out, _ = replay(t, "stats", "--data", dir, "--since", "1h")
	if code != 0 || !strings.Contains(out, "calculator") || !strings.Contains(out, "50.0%") {
		t.Fatalf("stats table:\n%s", out)
	}
	if code, _, errs := replay(t, "stats", "--data", dir, "--since", "yesterday-ish"); code != 2 || !strings.Contains(errs, "--since") {
		t.Fatalf("bad --since: %d %s", code, errs)
	}
}
