package main

import (
	"bytes"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// An export whose line is not UTF-8 is refused, naming the line and the byte,
// and the log it was imported into is left as it was. Before, the bytes were
// stored as they were: an event no node writes (its JSON is UTF-8), which every
// reader then decoded as another text (U+FFFD for each bad byte), as a body or
// an import's line that is not UTF-8 elsewhere is refused rather than repaired.
func TestImportRefusesALineThatIsNotUTF8(t *testing.T) {
	_, _, file, b := exportedSession(t)
	lines := bytes.SplitAfter(b, []byte("\n"))
	at := bytes.Index(lines[1], []byte("12 * (7"))
	if at < 0 {
		t.Fatalf("line 2 holds no task input: %s", lines[1])
	}
	lines[1] = bytes.Replace(lines[1], []byte("12 * (7"), []byte("12 \xff* (7"), 1)
	if err := os.WriteFile(file, bytes.Join(lines, nil), 0o600); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	recordSession(t, dir, "What is 2 + 2?")
	before := readAll(t, dir)
	code, out, errs := replay(t, "import", file, "--data", dir)
	if code != 1 || out != "" || !strings.Contains(errs, "line 2") || !strings.Contains(errs, "not UTF-8") ||
		!strings.Contains(errs, "at byte "+strconv.Itoa(at+3)) {
		t.Errorf("import: exit %d, stdout %q, stderr %q; want exit 1 and an error naming line 2, byte %d, and UTF-8", code, out, errs, at+3)
	}
	if after := readAll(t, dir); !reflect.DeepEqual(after, before) {
		t.Errorf("the log changed: %d streams before, %d after", len(before), len(after))
	}
}
