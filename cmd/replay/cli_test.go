package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
)

const hostileText = "echo \x1b[2J\x1b]0;pwned\x07 \rfake\u202egnp.exe \u009b31m"

// rawControls are characters no human-facing output may carry raw.
var rawControls = []string{"\x1b", "\x07", "\r", "\u202e", "\u009b"}

// appendSession writes events of session id straight into the log of dir, as any
// writer of the log could, without ingress's checks.
func appendSession(t *testing.T, dir, id string, payloads ...messages.Payload) []messages.Envelope {
	t.Helper()
	ctx := context.Background()
	lg, err := sqlite.Open(ctx, sqlite.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	var events []messages.Envelope
	for _, p := range payloads {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		seq := uint64(len(events) + 1)
		e.ID, e.SessionID, e.Seq, e.TS, e.Actor = fmt.Sprintf("%s/%d", id, seq), id, seq, time.Now().UnixMicro(), "session"
		if seq > 1 {
			e.CausationID, e.CorrelationID = events[seq-2].ID, events[0].ID
		}
		events = append(events, e)
	}
	if err := lg.Append(ctx, events); err != nil {
		t.Fatal(err)
	}
	if err := lg.Close(); err != nil {
		t.Fatal(err)
	}
	return events
}

// show and list print a session's text with its control characters escaped; --json
// stays JSON, which carries the text as it was recorded.
func TestShowAndListEscapeControls(t *testing.T) {
	dir := t.TempDir()
	id := recordSession(t, dir, hostileText)
	evil := "evil\x1b]0;x\x07"
	appendSession(t, dir, evil, &messages.TaskSubmitted{Input: "hi"})

	for _, args := range [][]string{{"show", id}, {"list"}} {
		code, out, errs := replay(t, append(args, "--data", dir)...)
		if code != 0 {
			t.Fatalf("%v: %d %s", args, code, errs)
		}
		for _, raw := range rawControls {
			if strings.Contains(out, raw) {
				t.Errorf("%v prints the raw control %q:\n%q", args, raw, out)
			}
		}
		want := `echo \x1b[2J\x1b]0;pwned\a \rfake\u202egnp.exe \u009b31m`
		if args[0] == "list" {
			want = `evil\x1b]0;x\a`
		}
		if !strings.Contains(out, want) {
			t.Errorf("%v lacks %s:\n%s", args, want, out)
		}
	}
	code, out, _ := replay(t, "show", id, "--data", dir, "--json")
	var tl Timeline
	if code != 0 || json.Unmarshal([]byte(out), &tl) != nil || tl.Roots[0].Summary != "task: "+hostileText {
		t.Fatalf("show --json: %d %s", code, out)
	}
}

// Each command accepts and lists its own flags only.
func TestCommandFlags(t *testing.T) {
	dir := t.TempDir()
	id := recordSession(t, dir, "echo hi")
	code, _, errs := replay(t, "fork", id, "--at", "2", "--since", "1h", "--data", dir)
	if code != 2 || !strings.Contains(errs, "-since") {
		t.Fatalf("fork --since: %d %s", code, errs)
	}
	for _, c := range []struct {
		cmd       string
		want, not []string
	}{
		{"fork", []string{"-at", "-model", "-input", "-session", "-data"}, []string{"-since", "-agent", "-limit", "-json", "-out"}},
		{"stats", []string{"-since", "-agent", "-json", "-data"}, []string{"-at", "-limit", "-input", "-out"}},
		{"list", []string{"-limit", "-json"}, []string{"-at", "-since", "-out"}},
		{"export", []string{"-out", "-data"}, []string{"-at", "-since", "-json"}},
		{"import", []string{"-data"}, []string{"-at", "-since", "-json", "-out"}},
		{"verify", []string{"-config", "-agents", "-full", "-json"}, []string{"-at", "-since", "-out"}},
		{"show", []string{"-json", "-data"}, []string{"-at", "-since", "-out"}},
	} {
		// Asked for, the usage is the answer: on stdout, exit 0 (as node's), so that
		// replay fork --help | less shows it.
		code, errs, stderr := replay(t, c.cmd, "-h")
		if code != 0 || !strings.Contains(errs, "replay "+c.cmd) || stderr != "" {
			t.Errorf("%s -h: %d %s (stderr %q)", c.cmd, code, errs, stderr)
		}
		// The command's line of usage (what replay --help and the README show) names
		// every flag the command takes, but --clickhouse, which the header names for all.
		line := regexp.MustCompile(`(?m)^  (replay .*)$`).FindStringSubmatch(errs)
		for _, m := range regexp.MustCompile(`(?m)^  -([a-z-]+)`).FindAllStringSubmatch(errs, -1) {
			if m[1] != "clickhouse" && (line == nil || !strings.Contains(line[1], "--"+m[1])) {
				t.Errorf("%s's usage line does not name --%s: %v", c.cmd, m[1], line)
			}
		}
		for _, w := range c.want {
			if !listsFlag(errs, w) {
				t.Errorf("%s -h does not list %s:\n%s", c.cmd, w, errs)
			}
		}
		for _, n := range c.not {
			if listsFlag(errs, n) {
				t.Errorf("%s -h lists %s:\n%s", c.cmd, n, errs)
			}
		}
	}
}

// listsFlag reports whether a flag set's usage lists flag (such as "-at").
func listsFlag(usage, flag string) bool {
	return regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(flag) + `\b`).MatchString(usage)
}

// A fork at a point where nothing is left to do, without --input, is refused and
// writes nothing.
func TestForkWithNothingToContinueCreatesNothing(t *testing.T) {
	dir := t.TempDir()
	id := recordSession(t, dir, "echo hi")
	before := readAll(t, dir)
	last := len(before[id])
	code, out, errs := replay(t, "fork", id, "--at", fmt.Sprint(last), "--session", "child", "--data", dir)
	if code == 0 || !strings.Contains(errs, "nothing to continue") || strings.Contains(out, "forked") {
		t.Fatalf("fork at the last seq: %d\n%s\n%s", code, out, errs)
	}
	if after := readAll(t, dir); len(after) != len(before) {
		t.Fatalf("the refused fork wrote a session: %d sessions, had %d", len(after), len(before))
	}
}

// A fork resumes the fork only: another unfinished session in the log is left as it is.
func TestForkResumesOnlyTheFork(t *testing.T) {
	dir := t.TempDir()
	id := recordSession(t, dir, "What is 12 * (7 + 5)?")
	other := appendSession(t, dir, "other",
		&messages.TaskSubmitted{Input: "echo other"},
		&messages.ModelRequested{Key: "other/2", Model: "offline", Step: 1, Messages: 2})
	code, out, errs := replay(t, "fork", id, "--at", "3", "--session", "child", "--data", dir)
	if code != 0 || !strings.Contains(out, "answer: 144") {
		t.Fatalf("fork: %d\n%s\n%s", code, out, errs)
	}
	if got := readAll(t, dir)["other"]; len(got) != len(other) {
		t.Fatalf("the fork resumed another session: %d events, had %d", len(got), len(other))
	}
}

func TestListOfAFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "events.db")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{{"list"}, {"show", "x"}, {"fork", "x", "--at", "1"}} {
		code, _, errs := replay(t, append(cmd, "--data", file)...)
		if code != 1 || !strings.Contains(errs, "not a directory") || strings.Contains(errs, "does not exist") {
			t.Errorf("%v --data FILE: %d %s", cmd, code, errs)
		}
	}
}

// countingReader counts the bytes read from it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// repeatReader yields n copies of b.
type repeatReader struct {
	b byte
	n int64
}

func (r *repeatReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	k := min(int64(len(p)), r.n)
	for i := range p[:k] {
		p[i] = r.b
	}
	r.n -= k
	return int(k), nil
}

// A line longer than the limit is refused as soon as the limit is passed, naming its
// line, without reading the rest of it into memory.
func TestImportBoundsALine(t *testing.T) {
	golden, err := os.ReadFile(filepath.Join("testdata", "session.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(golden), "\n")
	const huge = maxExportLine + 4<<20
	cr := &countingReader{r: io.MultiReader(strings.NewReader(lines[0]+lines[1]), &repeatReader{b: 'x', n: huge}, strings.NewReader("\n"))}
	_, _, err = readExport(cr)
	if !errors.Is(err, ErrBadExport) || !strings.Contains(err.Error(), "line 3") || !strings.Contains(err.Error(), fmt.Sprintf("%d MiB", maxExportLine>>20)) {
		t.Fatalf("readExport of an over-long line = %v, want an error naming line 3 and the limit", err)
	}
	if cr.n > maxExportLine+1<<20 {
		t.Fatalf("readExport read %d bytes of an over-long line before refusing it", cr.n)
	}
	// A line just under the limit is fine (here: a valid event padded with spaces).
	padded := strings.TrimSuffix(lines[2], "\n") + strings.Repeat(" ", maxExportLine-len(lines[2])+1) + "\n"
	if len(padded) != maxExportLine+1 {
		t.Fatalf("padded line is %d bytes", len(padded))
	}
	full := lines[0] + lines[1] + padded + strings.Join(lines[3:], "")
	if _, _, err := readExport(strings.NewReader(full)); err != nil {
		t.Fatalf("readExport with a line of exactly the limit: %v", err)
	}

	// Through the CLI: refused, and nothing written.
	file := filepath.Join(t.TempDir(), "big.jsonl")
	over := lines[0] + lines[1] + strings.Repeat(" ", maxExportLine+1) + "\n" + strings.Join(lines[2:], "")
	if err := os.WriteFile(file, []byte(over), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if code, _, errs := replay(t, "import", file, "--data", dir); code != 1 || !strings.Contains(errs, "line 3") {
		t.Fatalf("import of an over-long line: %d %s", code, errs)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("a rejected import wrote %d files", len(entries))
	}
}

// Import accepts only session IDs that ingress accepts, and writes nothing otherwise.
func TestImportRejectsSessionIDsIngressRefuses(t *testing.T) {
	golden, err := os.ReadFile(filepath.Join("testdata", "session.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var h exportHeader
	_ = json.Unmarshal(bytes.SplitN(golden, []byte("\n"), 2)[0], &h)
	for _, bad := range []string{"../etc", "with space", "-leading-dash", strings.Repeat("x", 129), "evil\x1b[2J", "naïve"} {
		quoted, _ := json.Marshal(bad)
		content := bytes.ReplaceAll(golden, []byte(`"`+h.SessionID+`"`), quoted)
		content = bytes.ReplaceAll(content, []byte(h.SessionID+"/"), []byte("x/"))
		file := filepath.Join(t.TempDir(), "bad.jsonl")
		if err := os.WriteFile(file, content, 0o644); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		code, _, errs := replay(t, "import", file, "--data", dir)
		if code != 1 || !strings.Contains(errs, "bad session export") || !strings.Contains(errs, "session ID") {
			t.Errorf("import of session %q: %d %s", bad, code, errs)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("a rejected import of %q wrote %d files", bad, len(entries))
		}
	}
}

// replay --help answers its usage on stdout with exit 0; an unknown command, or a
// command without its session, says so before the usage, on stderr, exit 2.
func TestHelpAndUsageErrors(t *testing.T) {
	for _, arg := range []string{"--help", "-h", "help"} {
		if code, out, errs := replay(t, arg); code != 0 || !strings.Contains(out, "replay fork") || errs != "" {
			t.Errorf("replay %s: %d %q (stderr %q)", arg, code, out, errs)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"shwo"}, `error: unknown command "shwo"`},
		{[]string{"show"}, "error: replay show needs a session ID"},
		{[]string{"import"}, "error: replay import needs the file"},
		{[]string{"list", "extra"}, `error: replay list takes no arguments, got ["extra"]`},
	} {
		code, out, errs := replay(t, c.args...)
		if code != 2 || out != "" || !strings.HasPrefix(errs, c.want) || !strings.Contains(errs, "usage:") {
			t.Errorf("replay %v: %d %q, stderr %q; want it to begin %q", c.args, code, out, errs, c.want)
		}
	}
}
