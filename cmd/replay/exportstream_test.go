package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
)

// export of a stream of the log that is no session (a configuration's, which every
// session's node records) is refused with its kind: it wrote a file that import
// then refused for its session ID.
func TestExportRefusesAStreamThatIsNoSession(t *testing.T) {
	dir := t.TempDir()
	recordSession(t, dir, "What is 12 * (7 + 5)?")
	code, out, errs := replay(t, "list", "--data", dir, "--json")
	var infos []eventlog.SessionInfo
	if code != 0 || json.Unmarshal([]byte(out), &infos) != nil {
		t.Fatalf("list: %d %s %s", code, out, errs)
	}
	for _, s := range infos {
		if s.Status != "config" {
			continue
		}
		file := filepath.Join(t.TempDir(), "stream.jsonl")
		code, _, errs := replay(t, "export", s.ID, "--data", dir, "--out", file)
		if code != 1 || !strings.Contains(errs, "no session") {
			t.Fatalf("export of %s: %d %s", s.ID, code, errs)
		}
		if _, err := os.Stat(file); err == nil {
			t.Fatalf("a refused export wrote %s", file)
		}
		return
	}
	t.Fatalf("no configuration's stream in %+v", infos)
}
