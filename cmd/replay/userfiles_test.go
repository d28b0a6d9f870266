package main

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// importGoldenAs writes the golden export, changed by edit, to a file and imports it
// into a fresh log: the exit code, stdout, stderr and the log's directory.
func importGoldenAs(t *testing.T, edit func(golden []byte) []byte) (int, string, string, string) {
	t.Helper()
	golden, err := os.ReadFile(filepath.Join("testdata", "session.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "session.jsonl")
	if err := os.WriteFile(file, edit(golden), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	code, out, errs := replay(t, "import", file, "--data", dir)
	return code, out, errs, dir
}

// replay stats prints the names a session recorded (a tool's name is the model's
// choice, an unknown tool's too) for a terminal: their control and bidi characters
// are escaped, as list and show escape them.
func TestStatsEscapesNamesForTheTerminal(t *testing.T) {
	code, _, errs, dir := importGoldenAs(t, func(g []byte) []byte {
		return bytes.ReplaceAll(g, []byte(`"tool":"calculator"`), []byte(`"tool":"calc\u001b]0;pwned\u0007\u202e\t\n"`))
	})
	if code != 0 {
		t.Fatalf("import: %s", errs)
	}
	code, out, errs := replay(t, "stats", "--data", dir)
	if code != 0 {
		t.Fatalf("stats: %d %s", code, errs)
	}
	if strings.ContainsAny(out, "\x1b\a\u202e\t") {
		t.Fatalf("stats printed a recorded name's control characters to the terminal:\n%q", out)
	}
	if !strings.Contains(out, `calc\x1b]0;pwned\a\u202e\t\n`) {
		t.Fatalf("stats does not show the tool's name escaped:\n%s", out)
	}
}

// replay stats --json of a log with nothing in it gives empty lists, as list --json
// gives [], not null: a script's `.tools[]` or `for t in s["tools"]` works on it.
func TestStatsJSONOfNothingHasEmptyLists(t *testing.T) {
	code, _, errs, dir := importGoldenAs(t, func(g []byte) []byte { return g })
	if code != 0 {
		t.Fatalf("import: %s", errs)
	}
	code, out, errs := replay(t, "stats", "--data", dir, "--agent", "nobody", "--json")
	if code != 0 {
		t.Fatalf("stats: %d %s", code, errs)
	}
	if strings.Contains(out, "null") {
		t.Fatalf("stats --json of nothing has null lists:\n%s", out)
	}
}

// An export as users get it back: saved by a Windows editor with a byte order mark,
// or gzip'd to be mailed, imports as the export it is.
func TestImportTakesAnExportWithABOMOrGzipped(t *testing.T) {
	for name, edit := range map[string]func([]byte) []byte{
		"BOM": func(g []byte) []byte { return append([]byte("\ufeff"), g...) },
		"BOM and CRLF": func(g []byte) []byte {
			return append([]byte("\ufeff"), bytes.ReplaceAll(g, []byte("\n"), []byte("\r\n"))...)
		},
		"gzip": func(g []byte) []byte {
			var b bytes.Buffer
			zw := gzip.NewWriter(&b)
			zw.Write(g)
			zw.Close()
			return b.Bytes()
		},
	} {
		t.Run(name, func(t *testing.T) {
			code, out, errs, _ := importGoldenAs(t, edit)
			if code != 0 || !strings.Contains(out, "imported session") {
				t.Fatalf("import: %d %s %s", code, out, errs)
			}
		})
	}
	// A gzip'd export cut short is refused, and nothing is written.
	code, _, errs, dir := importGoldenAs(t, func(g []byte) []byte {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		zw.Write(g)
		zw.Close()
		return b.Bytes()[:b.Len()/2]
	})
	if code != 1 || !strings.Contains(errs, "bad session export") {
		t.Fatalf("import of a gzip'd export cut short: %d %s", code, errs)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("a rejected import wrote %d files", len(entries))
	}
}

// Two exports in one file (cat a.jsonl b.jsonl) are refused with an error that says
// so at the second header's line, not that line 10 is an envelope missing its id.
func TestImportNamesASecondExportInTheFile(t *testing.T) {
	code, _, errs, dir := importGoldenAs(t, func(g []byte) []byte { return append(append([]byte{}, g...), g...) })
	if code != 1 || !strings.Contains(errs, "line 10") || !strings.Contains(errs, "8 events") || strings.Contains(errs, "missing id") {
		t.Fatalf("import of two exports in one file: %d %s", code, errs)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("a rejected import wrote %d files", len(entries))
	}
	// An event more than the header counts is named too, not taken for a cut.
	code, _, errs, _ = importGoldenAs(t, func(g []byte) []byte {
		lines := bytes.SplitAfter(g, []byte("\n"))
		return bytes.Join(append(lines[:len(lines)-1:len(lines)-1], lines[len(lines)-2]), nil)
	})
	if code != 1 || !strings.Contains(errs, "line 10: more lines than the header's 8 events") {
		t.Fatalf("import of an event more than the header counts: %d %s", code, errs)
	}
}
