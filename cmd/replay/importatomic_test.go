package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// An import the log refuses (an event ID the file gives twice, or one another
// session of the log holds) leaves the log as it was: the configurations the
// session names are written in the session's own append. Before, they were
// appended first, and stayed behind when the log refused the session.
func TestImportTheLogRefusesWritesNoConfiguration(t *testing.T) {
	_, _, file, b := exportedSession(t)
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

// An export that gives an event ID twice is refused as it is read, before the
// log is opened, whatever the session's length: a session past the bound of one
// append was written a batch at a time after its configurations, and the log's
// refusal of the second event left them (and the batches before it) behind,
// for good: the same import again is refused again.
func TestImportRefusesAnEventIDGivenTwice(t *testing.T) {
	ctx := context.Background()
	_, id, _, b := exportedSession(t)
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	idOf := func(line string) string {
		var e struct{ ID string }
		if err := json.Unmarshal([]byte(line), &e); err != nil || e.ID == "" {
			t.Fatalf("no event: %s", line)
		}
		return e.ID
	}
	config := len(lines) - 1 // the last line: the session's one configuration
	if !strings.Contains(lines[config], `"config.recorded"`) || strings.Contains(lines[config-1], `"config.recorded"`) {
		t.Fatalf("the export does not end with one configuration:\n%s", b)
	}
	for name, c := range map[string]struct{ line, as int }{
		"the ID of an earlier event": {3, 2},
		"the ID of a later event":    {2, 3},
		"its configuration's ID":     {config - 1, config},
	} {
		changed := slices.Clone(lines)
		twice := idOf(lines[c.as])
		changed[c.line] = strings.Replace(changed[c.line], `"id":"`+idOf(lines[c.line])+`"`, `"id":"`+twice+`"`, 1)
		path := filepath.Join(t.TempDir(), "twice.jsonl")
		if err := os.WriteFile(path, []byte(strings.Join(changed, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		open := func() (io.ReadCloser, error) { return os.Open(path) }
		plan, err := planImport(ctx, open, unfinishedRefuse, 0)
		if err != nil {
			if !errors.Is(err, ErrBadExport) || !strings.Contains(err.Error(), twice) || !strings.Contains(err.Error(), "twice") {
				t.Errorf("%s: import: %v; want a bad export naming %s given twice", name, err, twice)
			}
			continue
		}
		// Taken as sound, it is refused by the log once written in batches.
		dir := t.TempDir()
		log := openFailing(t, dir, id, 0)
		err = plan.write(ctx, log, open, appendBound{events: 1, bytes: 1})
		infos, lerr := log.Sessions(ctx, eventlog.Filter{})
		if lerr != nil {
			t.Fatal(lerr)
		}
		left := []string{}
		for _, i := range infos {
			left = append(left, i.ID)
		}
		t.Errorf("%s given %s: read as sound; written in batches: %v, and the log holds %v", name, twice, err, left)
	}
}

// A session past the bound of one append whose event the log refuses part way
// (an ID another session of the log holds) is left without its first event, as
// a failed write leaves it; but importing the file again is refused again, and
// the error says so rather than tell the user to do it.
func TestImportRefusedPartWaySaysItCannotComplete(t *testing.T) {
	ctx := context.Background()
	_, id, events := recordLongSession(t)
	_, src := writeExportFile(t, events)
	plan, err := planImport(ctx, src, unfinishedRefuse, 0)
	if err != nil {
		t.Fatal(err)
	}
	log := openFailing(t, t.TempDir(), id, 0)
	// Another session holds the ID of an event of the session's second page.
	taken := events[exportPageMax+5]
	other := taken
	other.SessionID, other.Seq, other.CausationID, other.CorrelationID = "other", 1, "", ""
	if err := log.Append(ctx, []messages.Envelope{other}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		err = plan.write(ctx, log, src, pageBound())
		if !errors.Is(err, eventlog.ErrSeqConflict) || !strings.Contains(err.Error(), "but not its first") {
			t.Fatalf("import refused part way: %v", err)
		}
		if strings.Contains(err.Error(), "import the file again") || !strings.Contains(err.Error(), "cannot complete") {
			t.Errorf("import refused part way: %v; want it to say that importing the file again cannot complete the session", err)
		}
		checkInert(t, log.pagedLog, id)
	}
}
