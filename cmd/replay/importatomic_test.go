package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An import the log refuses (an event ID the file gives twice, or one another
// session of the log holds) leaves the log as it was: the configurations the
// session names are written in the session's own append. Before, they were
// appended first, and stayed behind when the log refused the session.
func TestImportTheLogRefusesWritesNoConfiguration(t *testing.T) {
	src := t.TempDir()
	id := recordSession(t, src, "What is 12 * (7 + 5)?")
	file := filepath.Join(t.TempDir(), "s.jsonl")
	if code, _, errs := replay(t, "export", id, "--data", src, "--out", file); code != 0 {
		t.Fatal(errs)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"config.recorded"`) {
		t.Fatalf("the export names no configuration:\n%s", b)
	}
	lines := strings.Split(string(b), "\n")
	var second, third map[string]json.RawMessage
	if json.Unmarshal([]byte(lines[2]), &second) != nil || json.Unmarshal([]byte(lines[3]), &third) != nil {
		t.Fatalf("lines 3 and 4 are no events:\n%s\n%s", lines[2], lines[3])
	}
	lines[3] = strings.Replace(lines[3], `"id":`+string(third["id"]), `"id":`+string(second["id"]), 1)
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	code, out, errs := replay(t, "import", file, "--data", dir)
	if code != 1 || out != "" || !strings.Contains(errs, string(second["id"][1:len(second["id"])-1])) {
		t.Errorf("import of an event ID given twice: exit %d, stdout %q, stderr %q; want exit 1 naming the ID", code, out, errs)
	}
	if _, err := os.Stat(filepath.Join(dir, "events.db")); err == nil {
		if got := readAll(t, dir); len(got) != 0 {
			streams := make([]string, 0, len(got))
			for s := range got {
				streams = append(streams, s)
			}
			t.Errorf("a refused import left %v in the log", streams)
		}
	}
}
