package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
)

// testdata/session-rules1.jsonl was recorded and exported by the build of 8c2c1ee
// (before a cut kept the head and the tail of a text, and before tasks recorded
// their decision rules), with the offline model under a 700-token window (reserved
// output 100): the task's input is cut to its head, so the question at its end
// never reached the model. It is version 1 of the rules (actors.ContextRules).
const rules1Session = "rules1-window700"

// rules1Config writes the recording's context settings as a --config file.
func rules1Config(t *testing.T) string {
	t.Helper()
	config := filepath.Join(t.TempDir(), "node.json")
	if err := os.WriteFile(config, []byte(`{"context": {"window": 700, "reserved_output": 100}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return config
}

// A session recorded under the rules of an earlier build verifies against today's
// code: its task is re-decided under the rules it ran under.
func TestVerifyASessionRecordedUnderOlderRules(t *testing.T) {
	dir := t.TempDir()
	if code, out, errs := replay(t, "import", filepath.Join("testdata", "session-rules1.jsonl"), "--data", dir); code != 0 {
		t.Fatalf("import: %s %s", out, errs)
	}
	code, out, errs := replay(t, "verify", rules1Session, "--data", dir, "--config", rules1Config(t))
	if code != 0 || !strings.Contains(out, "deterministic (8 events") {
		t.Fatalf("verify of a session recorded under version 1: %d %s %s", code, out, errs)
	}
}

// A session with a task recorded under rules this build does not have (a later
// build's) is not reported as a divergence: verify names the version, exits 3, and
// fork makes no fork of it.
func TestVerifyAndForkNameRulesOfALaterBuild(t *testing.T) {
	golden, err := os.ReadFile(filepath.Join("testdata", "session-rules1.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	v := strconv.Itoa(actors.ContextRules + 1)
	later := strings.Replace(string(golden), `"payload":{"input":`, `"payload":{"rules":`+v+`,"input":`, 1)
	if later == string(golden) {
		t.Fatal("the fixture's task changed shape")
	}
	file := filepath.Join(t.TempDir(), "later.jsonl")
	if err := os.WriteFile(file, []byte(later), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if code, out, errs := replay(t, "import", file, "--data", dir); code != 0 {
		t.Fatalf("import: %s %s", out, errs)
	}
	config := rules1Config(t)
	code, out, errs := replay(t, "verify", rules1Session, "--data", dir, "--config", config)
	want := "session " + rules1Session + ": cannot verify: the task at seq 1 was recorded under decision rules version " + v + ", which is newer than this build"
	if code != exitUnsupportedRules || !strings.HasPrefix(out, want) || strings.Contains(out, "diverges") {
		t.Fatalf("verify: %d\n%s\n%s\nwant %q", code, out, errs, want)
	}
	code, out, _ = replay(t, "verify", rules1Session, "--data", dir, "--config", config, "--json")
	var res verifyResult
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != exitUnsupportedRules || res.Deterministic || res.Divergence != nil ||
		res.UnsupportedRules == nil || res.UnsupportedRules.Version != actors.ContextRules+1 || res.UnsupportedRules.Seq != 1 || !strings.Contains(res.Error, "version "+v) {
		t.Fatalf("verify --json: %d %s", code, out)
	}
	code, _, errs = replay(t, "fork", rules1Session, "--at", "2", "--data", dir, "--config", config, "--model", "offline", "--session", "later-fork")
	if code != 1 || !strings.Contains(errs, "decision rules version "+v) || !strings.Contains(errs, "no fork was made") {
		t.Fatalf("fork: %d %s", code, errs)
	}
	if code, _, _ := replay(t, "show", "later-fork", "--data", dir); code == 0 {
		t.Fatal("a fork was made")
	}
}
