package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An export's header and envelopes hold their keys as export writes them, each
// once: a key given twice, in another case ("Seq"), or unknown is refused,
// naming it. encoding/json took a key in any case and, given twice, its last
// value, so that a file another tool read as one session (a seq, a count of
// events) imported as another, and an unknown key was dropped. A byte order mark
// and CRLF line endings are still read as the export they are.
func TestImportRefusesKeysExportDoesNotWrite(t *testing.T) {
	_, _, _, b := exportedSession(t)
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	edit := func(line int, old, new string) []string {
		out := append([]string(nil), lines...)
		if !strings.Contains(out[line], old) {
			t.Fatalf("line %d has no %s: %s", line+1, old, out[line])
		}
		out[line] = strings.Replace(out[line], old, new, 1)
		return out
	}
	for name, c := range map[string]struct {
		lines []string
		says  string
	}{
		"a header key given twice":        {edit(0, `"events":`, `"events":1,"events":`), `"events" is given twice`},
		"a header key in another case":    {edit(0, `"events":`, `"Events":`), `"Events"`},
		"an envelope key given twice":     {edit(2, `"seq":2`, `"seq":3,"seq":2`), `"seq" is given twice`},
		"an envelope key in another case": {edit(2, `"seq":`, `"Seq":`), `"Seq"`},
		"an unknown envelope key":         {edit(2, `"actor":`, `"note":"x","actor":`), `"note"`},
	} {
		path := filepath.Join(t.TempDir(), "x.jsonl")
		if err := os.WriteFile(path, []byte(strings.Join(c.lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		code, out, errs := replay(t, "import", path, "--data", dir)
		if code != 1 || out != "" || !strings.Contains(errs, c.says) {
			t.Errorf("%s: import: exit %d, stdout %q, stderr %q; want exit 1 and an error naming %s", name, code, out, errs, c.says)
		}
		if _, err := os.Stat(filepath.Join(dir, "events.db")); err == nil {
			if got := readAll(t, dir); len(got) != 0 {
				t.Errorf("%s: the log holds %d streams after a refused import", name, len(got))
			}
		}
	}
	// As an editor saves it: a byte order mark and CRLF line endings.
	path := filepath.Join(t.TempDir(), "crlf.jsonl")
	if err := os.WriteFile(path, []byte("\ufeff"+strings.Join(lines, "\r\n")+"\r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := replay(t, "import", path, "--data", t.TempDir()); code != 0 {
		t.Errorf("import of the export with a byte order mark and CRLF: exit %d, %q, %q", code, out, errs)
	}
}
