package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	neturl "net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-run/troupe/consolidator"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// nodeMemory runs "node memory ARGS..." in process and returns its exit code and
// output.
func nodeMemory(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), append([]string{"memory"}, args...), &out, &errb, options{})
	return code, out.String(), errb.String()
}

// mustMemory runs "node memory ARGS..." and fails the test unless it exits 0.
func mustMemory(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errs := nodeMemory(t, args...)
	if code != 0 {
		t.Fatalf("node memory %s: exit %d\nstdout %s\nstderr %s", strings.Join(args, " "), code, out, errs)
	}
	return out
}

// memoryCLIEnv gives a test a working directory without .troupe.json, no model or
// data directory from the environment, and a data directory of its own.
func memoryCLIEnv(t *testing.T) (data string) {
	t.Helper()
	clearLLMEnv(t)
	t.Setenv("TROUPE_CLICKHOUSE", "")
	t.Setenv("TROUPE_MILVUS", "")
	t.Chdir(t.TempDir())
	return filepath.Join(t.TempDir(), "data")
}

// memoryEvents reads the events of namespace ns from the log in data.
func memoryEvents(t *testing.T, data, ns string) []messages.Envelope {
	t.Helper()
	lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: data, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	events, err := lg.Read(context.Background(), memory.Stream(ns), 1)
	if err != nil {
		t.Fatal(err)
	}
	return events
}

// addedIn returns the MemoryAdded payloads of events.
func addedIn(t *testing.T, events []messages.Envelope) []*messages.MemoryAdded {
	t.Helper()
	var added []*messages.MemoryAdded
	for _, e := range events {
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		if a, ok := p.(*messages.MemoryAdded); ok {
			added = append(added, a)
		}
	}
	return added
}

var memoryIDLine = regexp.MustCompile(`^m_[0-9a-f]{16}\n$`)

// add, search (a table and the documented JSON), history with and without
// --namespace, as text and JSON.
func TestMemoryCLIAddSearchHistory(t *testing.T) {
	data := memoryCLIEnv(t)
	lisbon := mustMemory(t, "add", "--data", data, "--namespace", "user:alice", "--tier", "episodic", "--importance", "0.8",
		"--timestamp", "2026-03-14T09:30:00Z", "--metadata", `{"source":"chat","turn":7}`, "Alice moved to Lisbon in March")
	// Flags may follow the content, as they do in most command lines.
	tea := mustMemory(t, "add", "Alice prefers green tea over coffee", "--data", data, "--namespace", "user:alice")
	mustMemory(t, "add", "--data", data, "--namespace", "user:bob", "Bob prefers coffee")
	for _, id := range []string{lisbon, tea} {
		if !memoryIDLine.MatchString(id) {
			t.Fatalf("add printed %q, want the memory ID and a newline", id)
		}
	}
	lisbon, tea = strings.TrimSpace(lisbon), strings.TrimSpace(tea)

	out := mustMemory(t, "search", "--data", data, "--namespace", "user:alice", "Lisbon in March")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 2 || !strings.HasPrefix(lines[0], "SCORE") || !strings.Contains(lines[1], lisbon) ||
		!strings.Contains(lines[1], "episodic") || !strings.Contains(lines[1], "Alice moved to Lisbon in March") {
		t.Fatalf("search table:\n%s", out)
	}
	if strings.Contains(out, "Bob") {
		t.Fatalf("search in user:alice found user:bob's memory:\n%s", out)
	}

	out = mustMemory(t, "search", "--data", data, "--namespace", "user:alice", "--json", "--limit", "1", "--tier", "episodic,semantic", "Lisbon")
	var doc map[string][]map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &doc); err != nil || len(doc) != 1 || len(doc["results"]) != 1 {
		t.Fatalf("search --json = %v:\n%s", err, out)
	}
	hit := doc["results"][0]
	var keys []string
	for k := range hit {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if got := strings.Join(keys, ","); got != "content,id,metadata,score,tier,timestamp" {
		t.Fatalf("a result has the fields %s, want content,id,metadata,score,tier,timestamp:\n%s", got, out)
	}
	var typed struct{ Results []node.SearchHit }
	if err := json.Unmarshal([]byte(out), &typed); err != nil {
		t.Fatal(err)
	}
	r := typed.Results[0]
	var meta map[string]any
	if r.ID != lisbon || r.Tier != memory.Episodic || r.Content != "Alice moved to Lisbon in March" || r.Score <= 0 ||
		!r.Timestamp.Equal(time.Date(2026, 3, 14, 9, 30, 0, 0, time.UTC)) || json.Unmarshal(r.Metadata, &meta) != nil ||
		meta["source"] != "chat" || meta["turn"] != 7.0 {
		t.Fatalf("search --json hit = %+v", r)
	}
	// Every result has metadata, {} when none was given.
	out = mustMemory(t, "search", "--data", data, "--namespace", "user:alice", "--json", "--tier", "semantic", "green tea")
	if !strings.Contains(out, `"id": "`+tea+`"`) || !strings.Contains(out, `"metadata": {}`) {
		t.Fatalf("search --json for tea:\n%s", out)
	}
	// A search with no hit prints an empty list, not null.
	if out := mustMemory(t, "search", "--data", data, "--namespace", "user:nobody", "--json", "tea"); !strings.Contains(out, `"results": []`) {
		t.Fatalf("search of an empty namespace:\n%s", out)
	}

	// history: without --namespace it looks in every namespace.
	for _, args := range [][]string{{"history", "--data", data, lisbon}, {"history", "--data", data, "--namespace", "user:alice", lisbon}} {
		out = mustMemory(t, args...)
		if !strings.HasPrefix(out, "memory "+lisbon+" in user:alice\nSEQ") || !strings.Contains(out, "memory.added") ||
			!strings.Contains(out, "added by node memory add") || !strings.Contains(out, "Alice moved to Lisbon in March") {
			t.Fatalf("%s:\n%s", strings.Join(args, " "), out)
		}
	}
	out = mustMemory(t, "history", "--data", data, "--json", lisbon)
	var ans node.HistoryAnswer
	if err := json.Unmarshal([]byte(out), &ans); err != nil {
		t.Fatal(err)
	}
	if ans.ID != lisbon || ans.Namespace != "user:alice" || len(ans.History) != 1 {
		t.Fatalf("history --json = %+v", ans)
	}
	if c := ans.History[0]; c.Type != messages.TypeMemoryAdded || c.Seq != 1 || c.Memory == nil || c.Memory.Importance != 0.8 ||
		!strings.HasPrefix(c.Key, "cli/") {
		t.Fatalf("history --json change = %+v", c)
	}
	// In another namespace, or unknown: exit 1, saying so.
	code, _, errs := nodeMemory(t, "history", "--data", data, "--namespace", "user:bob", lisbon)
	if code != 1 || !strings.Contains(errs, "no such memory") || !strings.Contains(errs, "in namespace user:bob") {
		t.Fatalf("history in the wrong namespace: exit %d, %s", code, errs)
	}
	code, _, errs = nodeMemory(t, "history", "--data", data, "m_0000000000000000")
	if code != 1 || !strings.Contains(errs, "no such memory: m_0000000000000000") {
		t.Fatalf("history of an unknown ID: exit %d, %s", code, errs)
	}
}

// import checks every line before it writes any: all the bad lines are named by
// FILE:LINE and the log is left as it was. A good file is written in batches of
// 1,000 (2,500 lines, three appends) under keys of its own, so that a second import
// writes nothing.
func TestMemoryCLIImport(t *testing.T) {
	data := memoryCLIEnv(t)
	mustMemory(t, "add", "--data", data, "--namespace", "user:bulk", "an older memory")
	before := memoryEvents(t, data, "user:bulk")

	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	body := `{"namespace":"user:bulk","tier":"semantic","content":"fine"}
{"namespace":"user:bulk","tier":"bogus","content":"x"}
not json

{"namespace":"user:bulk","tier":"working","content":"y","importance":1.5}
{"namespace":"user:bulk","tier":"working","content":"   "}
{"namespace":"","tier":"working","content":"z"}
{"namespace":"user:bulk","tier":"episodic","content":"fine too","timestamp":"yesterday"}
`
	if err := os.WriteFile(bad, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := nodeMemory(t, "import", "--data", data, bad)
	if code != 2 || out != "" {
		t.Fatalf("import of a bad file: exit %d\nstdout %s\nstderr %s", code, out, errs)
	}
	for _, want := range []string{"nothing imported: 6 of 8 lines are bad", bad + `:2: memory: invalid request: unknown tier "bogus"`,
		bad + ":3: ", bad + ":5: memory: invalid request: importance 1.5 outside [0, 1]", bad + ":6: memory: invalid request: empty content",
		bad + ":7: memory: invalid request: empty namespace", bad + `:8: memory: invalid request: timestamp "yesterday"`} {
		if !strings.Contains(errs, want) {
			t.Errorf("import of a bad file: stderr lacks %q:\n%s", want, errs)
		}
	}
	if strings.Contains(errs, ":1:") || strings.Contains(errs, ":4:") {
		t.Errorf("import of a bad file names a good or blank line:\n%s", errs)
	}
	if after := memoryEvents(t, data, "user:bulk"); len(after) != len(before) {
		t.Fatalf("a refused import wrote %d events", len(after)-len(before))
	}
	// Lines that only the write's limits refuse (a content over 16 KiB, a timestamp
	// more than a day ahead) are found before anything is written too, in whatever
	// namespace they are.
	limits := filepath.Join(t.TempDir(), "limits.jsonl")
	body = `{"namespace":"user:first","tier":"semantic","content":"written first, if anything were"}
{"namespace":"user:second","tier":"semantic","content":"` + strings.Repeat("y", 20000) + `"}
{"namespace":"user:second","tier":"semantic","content":"z","timestamp":"2099-01-01T00:00:00Z"}
`
	if err := os.WriteFile(limits, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs = nodeMemory(t, "import", "--data", data, limits)
	if code != 2 || out != "" || !strings.Contains(errs, "nothing imported: 2 of 3 memories are bad") ||
		!strings.Contains(errs, limits+":2: memory: invalid request: content of 20000 bytes; the limit is 16384") ||
		!strings.Contains(errs, limits+":3: memory: invalid request: timestamp 2099-01-01T00:00:00Z is more than 24h0m0s in the future") {
		t.Fatalf("import over the limits: exit %d\nstdout %s\nstderr %s", code, out, errs)
	}
	if evs := memoryEvents(t, data, "user:first"); len(evs) != 0 {
		t.Fatalf("an import refused for its second namespace wrote %d events to its first", len(evs))
	}

	const lines = 2500
	good := filepath.Join(t.TempDir(), "good.jsonl")
	var b strings.Builder
	for i := range lines {
		fmt.Fprintf(&b, `{"namespace":"user:bulk","tier":"semantic","content":"bulk fact %d, codeword w%dz","importance":0.4,"metadata":{"line":%d}}`+"\n", i, i, i+1)
	}
	if err := os.WriteFile(good, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	// Run again, the import writes nothing and says so: each memory is there already.
	for i, want := range []string{"%s: %d memories: 2500 written, 0 already there\n", "%s: %d memories: 0 written, 2500 already there\n"} {
		if out := mustMemory(t, "import", "--data", data, good); out != fmt.Sprintf(want, good, lines) {
			t.Fatalf("import %d: %q; want %q", i+1, out, fmt.Sprintf(want, good, lines))
		}
	}
	added := addedIn(t, memoryEvents(t, data, "user:bulk"))[1:]
	keys := map[string]int{}
	contents := map[string]int{}
	for _, a := range added {
		keys[a.Key]++
		contents[a.Memory.Content]++
		if a.Reason != "imported from "+good {
			t.Fatalf("imported with the reason %q", a.Reason)
		}
	}
	if len(added) != lines || len(contents) != lines {
		t.Fatalf("two imports of %d lines: %d memories added, %d distinct", lines, len(added), len(contents))
	}
	var sizes []int
	for _, n := range keys {
		sizes = append(sizes, n)
	}
	slices.Sort(sizes)
	if !slices.Equal(sizes, []int{500, 1000, 1000}) {
		t.Fatalf("the import's appends carried %v memories, want 1000, 1000 and 500", sizes)
	}
	out = mustMemory(t, "search", "--data", data, "--namespace", "user:bulk", "--json", "--limit", "1", "w1234z")
	if !strings.Contains(out, `"content": "bulk fact 1234, codeword w1234z"`) || !strings.Contains(out, `"line": 1235`) {
		t.Fatalf("search after the import:\n%s", out)
	}
}

// consolidate prints its report (text and JSON) and applies the configured policy;
// the config's working capacity holds; history shows the merge and the promotion.
func TestMemoryCLIConsolidateWithConfig(t *testing.T) {
	data := memoryCLIEnv(t)
	cfg := writeConfig(t, `{"memory": {"working_capacity": 3, "consolidator": {"promote_above": 0.8, "duplicate_threshold": 0.95, "disabled": true}}}`)
	add := func(args ...string) string {
		return strings.TrimSpace(mustMemory(t, append([]string{"add", "--config", cfg, "--data", data, "--namespace", "user:alice"}, args...)...))
	}
	var working []string
	for i, imp := range []string{"0.5", "0.9", "0.75", "0.5"} {
		working = append(working, add("--tier", "working", "--importance", imp, fmt.Sprintf("working note %d", i)))
	}
	// working_capacity 3: the fourth write forgot the least valuable (the oldest of importance 0.5).
	out := mustMemory(t, "history", "--config", cfg, "--data", data, working[0])
	if !strings.Contains(out, "memory.forgotten") || !strings.Contains(out, "capacity 3") {
		t.Fatalf("history of the memory over capacity:\n%s", out)
	}
	kept := add("--tier", "semantic", "Alice lives in Lisbon")
	dup := add("--tier", "semantic", "--metadata", `{"from":"chat"}`, "Alice lives in Lisbon.")

	out = mustMemory(t, "consolidate", "--config", cfg, "--data", data, "--namespace", "user:alice")
	// promote_above 0.8: only the 0.9 memory moves (the default, 0.7, would move 0.75 too).
	for _, want := range []string{"consolidated user:alice: forgot 0, merged 1, promoted 1, distilled 0, invalidated 0",
		"- promote " + working[1] + " to episodic: importance 0.9 > 0.8", "- merge " + dup + " into " + kept + ": cosine"} {
		if !strings.Contains(out, want) {
			t.Errorf("consolidate report lacks %q:\n%s", want, out)
		}
	}
	out = mustMemory(t, "history", "--config", cfg, "--data", data, "--namespace", "user:alice", working[1])
	if !strings.Contains(out, "memory.promoted  importance 0.9 > 0.8") {
		t.Errorf("history of the promoted memory:\n%s", out)
	}
	out = mustMemory(t, "history", "--config", cfg, "--data", data, "--json", kept)
	var ans node.HistoryAnswer
	if err := json.Unmarshal([]byte(out), &ans); err != nil || len(ans.History) != 2 {
		t.Fatalf("history --json of the merged memory: %v\n%s", err, out)
	}
	var merged map[string]string
	if m := ans.History[1]; m.Type != messages.TypeMemoryMerged || !slices.Equal(m.Related, []string{dup}) ||
		json.Unmarshal(m.Memory.Metadata, &merged) != nil || merged["from"] != "chat" {
		t.Errorf("the merge in the history: %+v, metadata %s", m, m.Memory.Metadata)
	}

	// A second run finds nothing to do; --json prints the report's fields.
	out = mustMemory(t, "consolidate", "--config", cfg, "--data", data, "--namespace", "user:alice", "--json")
	var rep consolidator.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Namespace != "user:alice" || rep.Merged+rep.Promoted+rep.Forgotten != 0 {
		t.Fatalf("consolidate --json = %+v, %v:\n%s", rep, err, out)
	}
	// No decision is an empty list, as no result of search is: jq '.decisions[]' works.
	if !strings.Contains(out, `"decisions": []`) {
		t.Errorf("consolidate --json with nothing to do:\n%s", out)
	}
}

// Usage errors exit 2 with a message that says what is wrong, before anything is
// opened: no data directory appears.
func TestMemoryCLIUsageErrors(t *testing.T) {
	data := memoryCLIEnv(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{}, "usage:"},
		{[]string{"frob"}, `unknown command "node memory frob": want add, search, import, consolidate or history`},
		{[]string{"add", "x"}, "node memory add needs --namespace NS"},
		{[]string{"search", "x"}, "node memory search needs --namespace NS"},
		{[]string{"consolidate"}, "node memory consolidate needs --namespace NS"},
		{[]string{"add", "--namespace", "user alice", "x"}, `namespace "user alice": use 1 to 128 ASCII letters, digits and . _ - : @`},
		{[]string{"add", "--namespace", "user:日本", "x"}, `namespace "user:日本": use 1 to 128 ASCII letters`},
		{[]string{"add", "--namespace", "user:a"}, "node memory add wants the content as its one argument"},
		{[]string{"add", "--namespace", "user:a", "one", "two"}, "got 2 arguments"},
		{[]string{"add", "--namespace", "user:a", "   "}, "empty content"},
		{[]string{"add", "--namespace", "user:a", "--tier", "longterm", "x"}, `unknown tier "longterm": want working, episodic, semantic or perceptual`},
		{[]string{"add", "--namespace", "user:a", "--importance", "1.5", "x"}, "importance 1.5 outside [0, 1]"},
		{[]string{"add", "--namespace", "user:a", "--importance", "-1", "x"}, "importance -1 outside [0, 1]"},
		{[]string{"add", "--namespace", "user:a", "--importance", "high", "x"}, `invalid value "high" for flag -importance`},
		{[]string{"add", "--namespace", "user:a", "--metadata", "{", "x"}, "metadata must be a JSON object"},
		{[]string{"add", "--namespace", "user:a", "--metadata", "[1]", "x"}, "metadata must be a JSON object"},
		{[]string{"add", "--namespace", "user:a", "--timestamp", "today", "x"}, `timestamp "today" is not RFC 3339`},
		{[]string{"search", "--namespace", "user:a", ""}, "q is empty: say what to search for"},
		{[]string{"search", "--namespace", "user:a", "--limit", "0", "x"}, `limit "0": want 1 to 100`},
		{[]string{"search", "--namespace", "user:a", "--tier", "working,nope", "x"}, `unknown tier "nope"`},
		{[]string{"search", "--namespace", "user:a", "--mode", "fuzzy", "x"}, `mode "fuzzy": want hybrid, vector or keyword`},
		{[]string{"consolidate", "--namespace", "user:a", "now"}, "node memory consolidate takes no argument"},
		{[]string{"history"}, "node memory history wants the memory ID"},
		{[]string{"history", "--namespace", "user/alice", "m_1"}, `--namespace: memory: invalid request: namespace "user/alice"`},
		{[]string{"import"}, "node memory import wants the file"},
		{[]string{"import", "missing.jsonl"}, "missing.jsonl: no such file"},
		{[]string{"add", "--frobnicate", "x"}, "flag provided but not defined: -frobnicate"},
	} {
		code, out, errs := nodeMemory(t, append(c.args, "--data", data)...)
		if len(c.args) == 0 {
			code, out, errs = nodeMemory(t)
		}
		if code != 2 || out != "" || !strings.Contains(errs, c.want) {
			t.Errorf("node memory %q: exit %d\nstdout %s\nstderr %s\nwant exit 2 and %q", c.args, code, out, errs, c.want)
		}
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Fatalf("a usage error created the data directory: %v", err)
	}
	if code, out, _ := nodeMemory(t, "--help"); code != 0 || !strings.Contains(out, "node memory import FILE.jsonl") {
		t.Fatalf("node memory --help: exit %d %s", code, out)
	}
}

// memoryChild starts a real `node serve` on dir/data (the test binary re-executed,
// as in crash_test.go) with a model that answers "ok".
func memoryChild(t *testing.T, dir string, flags ...string) *child {
	t.Helper()
	script := filepath.Join(dir, "script.json")
	if err := os.WriteFile(script, []byte(`{"name":"scripted","steps":[{"content":"ok"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return startChildWith(t, dir, script, filepath.Join(dir, "records.txt"), filepath.Join(dir, "model.txt"),
		[]string{"TROUPE_MILVUS="}, flags...)
}

// stop ends a child with SIGTERM and waits for it.
func (c *child) stop() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	_ = c.cmd.Wait()
}

// A data directory a running node serves is locked: node memory says so at once
// and points at the HTTP API, and writes nothing.
func TestMemoryCLIDataLockedByServe(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a node process")
	}
	memoryCLIEnv(t)
	dir := t.TempDir()
	srv := memoryChild(t, dir)
	defer srv.stop()
	data := filepath.Join(dir, "data")
	for _, args := range [][]string{
		{"add", "--data", data, "--namespace", "user:alice", "x"},
		{"search", "--data", data, "--namespace", "user:alice", "x"},
		{"history", "--data", data, "m_0000000000000000"},
	} {
		type result struct {
			code      int
			out, errs string
		}
		done := make(chan result, 1)
		go func() {
			var out, errb bytes.Buffer
			code := run(context.Background(), append([]string{"memory"}, args...), &out, &errb, options{})
			done <- result{code, out.String(), errb.String()}
		}()
		select {
		case r := <-done:
			if r.code != 1 || r.out != "" || !strings.Contains(r.errs, "data directory is locked by another process") ||
				!strings.Contains(r.errs, fmt.Sprintf("held by pid %d", srv.cmd.Process.Pid)) || !strings.Contains(r.errs, "/v1/memories") {
				t.Errorf("node memory %s on a served directory: exit %d\nstdout %s\nstderr %s", args[0], r.code, r.out, r.errs)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("node memory %s on a served directory did not return in 20 s", args[0])
		}
	}
}

// postMemory sends one memory with an Idempotency-Key and returns the status and
// the IDs; err is a failure of the connection (the node gone).
func postMemory(c *child, key, body string) (int, []string, error) {
	req, err := http.NewRequest(http.MethodPost, "http://"+c.addr+"/v1/memories", strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var out struct{ IDs []string }
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, err
	}
	if resp.StatusCode == http.StatusCreated {
		if err := json.Unmarshal(b, &out); err != nil {
			return 0, nil, err
		}
	}
	return resp.StatusCode, out.IDs, nil
}

func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %d, %v", url, resp.StatusCode, err)
	}
	return resp.StatusCode
}

// A namespace survives kill -9: writers post memories over HTTP (batches of ten),
// each request with its Idempotency-Key, until the node is killed mid-stream. On the
// same data directory the next node has every acknowledged memory exactly once; the
// requests in flight at the kill, sent again with their keys, are written at most
// once; search finds the memories (the vector projection is rebuilt) and history
// answers.
func TestMemoryKillNineKeepsEveryAcknowledgedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills node processes")
	}
	memoryCLIEnv(t)
	dir := t.TempDir()
	const ns, writers, batch = "user:crash", 4, 10
	// Words of their own per memory, so that no two look alike to the consolidator's
	// dedupe (which runs in the background, every 50 writes).
	word := func(i, j int) string { return fmt.Sprintf("w%x", sha256.Sum256(fmt.Appendf(nil, "%d/%d", i, j)))[:11] }
	content := func(i int) string {
		return fmt.Sprintf("crash memory %d: %s %s %s %s", i, word(i, 0), word(i, 1), word(i, 2), word(i, 3))
	}
	body := func(r int) string { // request r carries memories r*batch … r*batch+batch-1
		var items []string
		for i := r * batch; i < (r+1)*batch; i++ {
			items = append(items, fmt.Sprintf(`{"namespace":%q,"tier":"episodic","content":%q,"importance":0.6,"metadata":{"n":%d}}`, ns, content(i), i))
		}
		return "[" + strings.Join(items, ",") + "]"
	}
	key := func(r int) string { return fmt.Sprintf("crash-%05d", r) }

	first := memoryChild(t, dir)
	type sent struct {
		r   int
		ids []string
	}
	var (
		acked    = make(chan sent, 100_000)
		inFlight = make(chan int, writers)
		failures = make(chan string, writers)
	)
	for w := range writers {
		go func() {
			for r := w; ; r += writers {
				code, ids, err := postMemory(first, key(r), body(r))
				switch {
				case err != nil:
					inFlight <- r // the node is gone: this one may or may not be written
					return
				case code != http.StatusCreated || len(ids) != batch:
					failures <- fmt.Sprintf("request %d: %d %v", r, code, ids)
					inFlight <- r
					return
				}
				acked <- sent{r, ids}
			}
		}()
	}
	deadline := time.After(30 * time.Second)
	for len(acked) < 60 {
		select {
		case f := <-failures:
			t.Fatalf("before the kill: %s\n%s", f, first.stderr.String())
		case <-deadline:
			t.Fatalf("only %d requests acknowledged in 30 s:\n%s", len(acked), first.stderr.String())
		case <-time.After(5 * time.Millisecond):
		}
	}
	first.kill9(t)
	var pending []int
	for range writers {
		select {
		case r := <-inFlight:
			pending = append(pending, r)
		case <-time.After(20 * time.Second):
			t.Fatal("a writer did not notice the kill in 20 s")
		}
	}
	close(acked)
	select {
	case f := <-failures:
		t.Fatalf("a write failed before the kill: %s", f)
	default:
	}
	ids := map[int]string{} // memory number -> ID
	requests := map[int]int{}
	record := func(r int, got []string) {
		requests[r]++
		for j, id := range got {
			ids[r*batch+j] = id
		}
	}
	for s := range acked {
		record(s.r, s.ids)
	}
	ackedMemories := len(ids)

	// countAdded counts the memories added to the namespace by ID and by content.
	countAdded := func() (byID, byContent map[string]int) {
		byID, byContent = map[string]int{}, map[string]int{}
		for _, a := range addedIn(t, memoryEvents(t, filepath.Join(dir, "data"), ns)) {
			byID[a.Memory.MemoryID]++
			byContent[a.Memory.Content]++
		}
		return byID, byContent
	}
	atKill, contentAtKill := countAdded()
	writtenInFlight := 0
	for _, r := range pending {
		writtenInFlight += contentAtKill[content(r*batch)]
	}

	second := memoryChild(t, dir)
	defer second.stop()
	// The requests in flight at the kill, sent again with the same keys (twice).
	for _, r := range pending {
		var again []string
		for try := range 2 {
			code, got, err := postMemory(second, key(r), body(r))
			if err != nil || code != http.StatusCreated || len(got) != batch || try == 1 && !slices.Equal(got, again) {
				t.Fatalf("retry %d of request %d: %d %v %v (first %v)", try, r, code, got, err, again)
			}
			again = got
		}
		record(r, again)
	}

	after, contentAfter := countAdded()
	duplicates := 0
	for c, n := range contentAfter {
		if n != 1 {
			duplicates += n - 1
			t.Errorf("%q added %d times", c, n)
		}
	}
	for i, id := range ids {
		if after[id] != 1 || contentAfter[content(i)] != 1 {
			t.Errorf("memory %d (%s) is in the log %d times (its content %d times), want once", i, id, after[id], contentAfter[content(i)])
		}
	}
	if len(after) != len(ids) {
		t.Errorf("%d memories in the log after the restart, want the %d acknowledged and retried", len(after), len(ids))
	}

	// Search finds them, by keyword and by vector alone; history answers.
	var sample []int
	for i := range ids {
		sample = append(sample, i)
	}
	slices.Sort(sample)
	sample = append(slices.Clone(sample[:3]), sample[len(sample)/2:len(sample)/2+3]...)
	for _, r := range pending {
		sample = append(sample, r*batch, r*batch+batch-1)
	}
	for _, i := range sample {
		// The offline embedder hashes words into 256 buckets: a lone word may share
		// its bucket with another, the whole content is its own.
		for mode, q := range map[string]string{"keyword": word(i, 0), "hybrid": word(i, 0) + " " + word(i, 1), "vector": content(i)} {
			var res struct{ Results []node.SearchHit }
			url := fmt.Sprintf("http://%s/v1/memories/search?namespace=%s&q=%s&limit=1&mode=%s", second.addr, ns, neturl.QueryEscape(q), mode)
			if code := getJSON(t, url, &res); code != http.StatusOK || len(res.Results) != 1 || res.Results[0].ID != ids[i] {
				t.Errorf("search %s for memory %d (%s): %d %+v", mode, i, ids[i], code, res.Results)
			}
		}
		var ans node.HistoryAnswer
		url := fmt.Sprintf("http://%s/v1/memories/%s/history", second.addr, ids[i])
		if code := getJSON(t, url, &ans); code != http.StatusOK || ans.Namespace != ns || len(ans.History) != 1 ||
			ans.History[0].Type != messages.TypeMemoryAdded || ans.History[0].Key != "http/"+key(i/batch)+"/"+ns {
			t.Errorf("history of memory %d: %d %+v", i, code, ans)
		}
	}
	t.Logf("acknowledged before the kill: %d memories (%d requests); in flight: %d requests (%d of them written before the kill); in the log at the kill: %d; after the restart and the retries: %d; duplicates: %d",
		ackedMemories, ackedMemories/batch, len(pending), writtenInFlight, len(atKill), len(after), duplicates)
}

// With "memory": {"tool": true}, node tools lists and calls the memory tool on the
// data directory's memories, which node memory then finds; the notes share the log.
func TestMemoryToolThroughTheCLI(t *testing.T) {
	data := memoryCLIEnv(t)
	cfg := writeConfig(t, `{"memory": {"tool": true, "namespaces": ["user:alice"]}, "tools": {"notes": {}}}`)
	for _, c := range []struct {
		args     []string
		code     int
		out, err string
	}{
		{args: []string{"list", "--config", cfg, "--data", data}, out: "\nmemory      builtin  Your long-term memory"},
		{args: []string{"call", "--config", cfg, "--data", data, "memory",
			`{"op":"add","args":{"namespace":"user:alice","tier":"semantic","content":"Alice is allergic to peanuts","importance":0.9}}`},
			out: `"event":"ADD"`},
		{args: []string{"call", "--config", cfg, "--data", data, "memory", `{"op":"add","args":{"namespace":"user:bob","tier":"semantic","content":"x"}}`},
			code: 1, err: "namespace"},
		{args: []string{"call", "--config", cfg, "--data", data, "memory", `{"op":"add","args":{"tier":"longterm","content":"x"}}`},
			code: 1, err: `"tier" must be one of "working", "episodic", "semantic", "perceptual", not "longterm"`},
		{args: []string{"call", "--config", cfg, "--data", data, "notes", `{"op":"add","args":{"body":"beside the memories"}}`}, out: `"id":"n1"`},
	} {
		code, out, errs := nodeTools(t, options{}, c.args...)
		if code != c.code || !strings.Contains(out, c.out) || !strings.Contains(errs, c.err) {
			t.Errorf("tools %s: exit %d\nstdout %s\nstderr %s\nwant exit %d, stdout with %q, stderr with %q", strings.Join(c.args, " "), code, out, errs, c.code, c.out, c.err)
		}
	}
	if out := mustMemory(t, "search", "--data", data, "--namespace", "user:alice", "peanuts"); !strings.Contains(out, "Alice is allergic to peanuts") {
		t.Fatalf("node memory search after the tool's add:\n%s", out)
	}
}

// With no model configured the node runs the offline rule-based model, which
// cannot summarise: the consolidator distils nothing and says why, instead of
// storing the offline model's canned reply as a fact.
func TestMemoryCLIOfflineModelDistilsNothing(t *testing.T) {
	data := memoryCLIEnv(t)
	for _, day := range []string{"Saturday", "Sunday", "Monday"} {
		mustMemory(t, "add", "--data", data, "--namespace", "user:a", "--tier", "episodic", "Alice went hiking in Sintra on "+day)
	}
	out := mustMemory(t, "consolidate", "--data", data, "--namespace", "user:a")
	if !strings.Contains(out, "distilled 0") || !strings.Contains(out, "no model configured: a cluster is distilled by a model only") {
		t.Fatalf("consolidate with the offline model:\n%s", out)
	}
	if out := mustMemory(t, "search", "--data", data, "--namespace", "user:a", "--tier", "semantic", "offline model"); strings.Contains(out, "semantic") {
		t.Fatalf("a semantic memory was distilled:\n%s", out)
	}
}

// A batch over HTTP is checked whole before any of it is written: a memory over the
// write's limits in the last namespace leaves the first namespace untouched (400).
func TestMemoryHTTPBadBatchWritesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a node process")
	}
	memoryCLIEnv(t)
	dir := t.TempDir()
	srv := memoryChild(t, dir)
	for _, bad := range []string{`"content":"` + strings.Repeat("y", 20000) + `"`, `"content":"z","timestamp":"2099-01-01T00:00:00Z"`} {
		body := `[{"namespace":"user:first","tier":"semantic","content":"fine"},{"namespace":"user:second","tier":"semantic",` + bad + `}]`
		code, ids, err := postMemory(srv, "", body)
		if err != nil || code != http.StatusBadRequest || ids != nil {
			t.Fatalf("a batch with a bad memory: %d %v %v", code, ids, err)
		}
	}
	srv.stop()
	if evs := memoryEvents(t, filepath.Join(dir, "data"), "user:first"); len(evs) != 0 {
		t.Fatalf("a refused batch wrote %d events to its first namespace", len(evs))
	}
}

// A memory's content and a change's reason come from users, tools and models: the
// tables of search and history show their control characters and bidirectional
// overrides escaped instead of handing them to the terminal, which would run them
// (clear the screen, set its title, reorder the line).
func TestMemoryCLITablesEscapeControlCharacters(t *testing.T) {
	data := memoryCLIEnv(t)
	cfg := writeConfig(t, `{"memory": {"tool": true}}`)
	hostile := "evil \x1b[2J\x1b]0;pwned\x07 title \u202egnp.exe\u202c \u0085end"
	id := strings.TrimSpace(mustMemory(t, "add", "--data", data, "--namespace", "agent:default", hostile))
	code, out, errs := nodeTools(t, options{}, "call", "--config", cfg, "--data", data, "memory",
		`{"op":"forget","args":{"ids":["`+id+`"],"reason":"asked \u001b[31mred\u001b[0m \u009b1m"}}`)
	if code != 0 {
		t.Fatalf("tool forget: exit %d\n%s%s", code, out, errs)
	}
	mustMemory(t, "add", "--data", data, "--namespace", "agent:default", "again "+hostile)
	tables := mustMemory(t, "search", "--data", data, "--namespace", "agent:default", "evil title") +
		mustMemory(t, "history", "--data", data, id)
	for _, bad := range []string{"\x1b", "\x07", "\u202e", "\u202c", "\u009b", "\u0085"} {
		if strings.Contains(tables, bad) {
			t.Errorf("the tables hold %q raw:\n%q", bad, tables)
		}
	}
	for _, want := range []string{`evil \x1b[2J\x1b]0;pwned\x07 title \u202egnp.exe\u202c end`, `asked \x1b[31mred\x1b[0m \x9b1m`} {
		if !strings.Contains(tables, want) {
			t.Errorf("the tables lack %q:\n%s", want, tables)
		}
	}
}

// A data directory keeps the embedder it was filled with: searched with another
// (vectors of another dimension), a hybrid search ranks without the vector store and
// says so, in the JSON's "note" as the HTTP API does, and on stderr below the table.
func TestMemoryCLISearchCarriesTheNote(t *testing.T) {
	data := memoryCLIEnv(t)
	lisbon := strings.TrimSpace(mustMemory(t, "add", "--data", data, "--namespace", "user:alice", "Alice lives in Lisbon"))
	// An OpenAI-compatible embeddings endpoint whose vectors have 8 dimensions, not
	// the offline embedder's 256.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Input []string `json:"input"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		type item struct {
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		}
		out := struct {
			Data []item `json:"data"`
		}{}
		for i, s := range req.Input {
			sum := sha256.Sum256([]byte(s))
			v := make([]float32, 8)
			for j := range v {
				v[j] = float32(sum[j]) - 127.5
			}
			out.Data = append(out.Data, item{Index: i, Embedding: v})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	}))
	t.Cleanup(srv.Close)
	cfg := writeConfig(t, `{"memory": {"embedder": {"base_url": "`+srv.URL+`/v1", "query_model": "q", "passage_model": "p"}}}`)

	code, out, errs := nodeMemory(t, "search", "--config", cfg, "--data", data, "--namespace", "user:alice", "--json", "Lisbon")
	var ans node.SearchAnswer
	if code != 0 || json.Unmarshal([]byte(out), &ans) != nil {
		t.Fatalf("search --json: exit %d\n%s%s", code, out, errs)
	}
	if len(ans.Results) != 1 || ans.Results[0].ID != lisbon || !strings.Contains(ans.Note, "without the vector store") ||
		!strings.Contains(ans.Note, "dimension") {
		t.Fatalf("search --json = %+v; want %s and a note that the vector store was left out, and why", ans, lisbon)
	}
	code, out, errs = nodeMemory(t, "search", "--config", cfg, "--data", data, "--namespace", "user:alice", "Lisbon")
	if code != 0 || !strings.Contains(out, lisbon) || !strings.HasPrefix(errs, "note: ranked by keyword") || strings.Contains(out, "note:") {
		t.Fatalf("search: exit %d\nstdout %s\nstderr %s\nwant the table on stdout and the note on stderr", code, out, errs)
	}
}

// A file saved "UTF-8 with BOM" and CRLF line ends (as some editors and
// spreadsheets write JSONL) imports as any other; a path that is no file is named
// as such, not as a line too long.
func TestMemoryCLIImportByteOrderMarkAndCRLF(t *testing.T) {
	data := memoryCLIEnv(t)
	f := filepath.Join(t.TempDir(), "bom.jsonl")
	body := "\ufeff" + `{"namespace":"user:bom","tier":"semantic","content":"first line"}` + "\r\n" +
		`{"namespace":"user:bom","tier":"semantic","content":"second line"}` + "\r\n"
	if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := mustMemory(t, "import", "--data", data, f); out != f+": 2 memories: 2 written, 0 already there\n" {
		t.Fatalf("import: %s", out)
	}
	if added := addedIn(t, memoryEvents(t, data, "user:bom")); len(added) != 2 || added[0].Memory.Content != "first line" {
		t.Fatalf("added %+v", added)
	}
	dir := t.TempDir()
	code, _, errs := nodeMemory(t, "import", "--data", data, dir)
	if code != 2 || !strings.Contains(errs, "is a directory") || strings.Contains(errs, "1 MiB") {
		t.Fatalf("import of a directory: exit %d, %s", code, errs)
	}
}

// An import says how many of its memories it wrote and how many were there
// already: stored before with the same content, or imported by an earlier run.
func TestMemoryCLIImportCountsWhatWasThere(t *testing.T) {
	data := memoryCLIEnv(t)
	mustMemory(t, "add", "--data", data, "--namespace", "user:bob", "Bob likes jazz")
	f := filepath.Join(t.TempDir(), "bob.jsonl")
	body := `{"namespace":"user:bob","tier":"semantic","content":"Bob likes jazz"}
{"namespace":"user:bob","tier":"semantic","content":"Bob went to Porto"}
{"namespace":"user:carol","tier":"semantic","content":"Carol sings"}
`
	if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := mustMemory(t, "import", "--data", data, f); out != f+": 3 memories: 2 written, 1 already there\n" {
		t.Fatalf("first import: %q", out)
	}
	if out := mustMemory(t, "import", "--data", data, f); out != f+": 3 memories: 0 written, 3 already there\n" {
		t.Fatalf("second import: %q", out)
	}
	if added := addedIn(t, memoryEvents(t, data, "user:bob")); len(added) != 2 {
		t.Fatalf("user:bob: %d memories added; want 2", len(added))
	}
}
