package nodeconfig

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/provider"
)

// shortDuration cuts zero units whole: 10m0s is 10m, not 1.
func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		10 * time.Minute: "10m", 720 * time.Hour: "720h", time.Hour + 30*time.Minute: "1h30m",
		time.Second: "1s", 100 * time.Millisecond: "100ms", 90 * time.Second: "1m30s", 20 * time.Hour: "20h",
	} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%s) = %q, want %q", d, got, want)
		}
	}
}

// tool_embedder gives search disclosure an embedder: the offline one for hashing,
// and for llm the one of the model's provider (the offline one for the offline model).
func TestNewToolEmbedder(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		file, spec string
		hashing    bool
	}{
		{"", "offline", false},
		{ToolEmbedderHashing, "auto", true},
		{ToolEmbedderLLM, "offline", true},
		{ToolEmbedderLLM, "scripted:x.json", true},
	} {
		e, key, err := File{Disclosure: "search", ToolEmbedder: c.file}.NewToolEmbedder(ctx, c.spec, provider.Config{})
		if err != nil || key != "" {
			t.Fatalf("%q on %s: %v %q", c.file, c.spec, err, key)
		}
		if _, ok := e.(llm.HashingEmbedder); ok != c.hashing || !c.hashing && e != nil {
			t.Errorf("%q on %s: embedder %T", c.file, c.spec, e)
		}
	}
	if err := (File{Disclosure: "search", ToolEmbedder: "llm"}).Validate(); err != nil {
		t.Errorf("llm with search: %v", err)
	}
}

// The call timeouts take 100ms to 1h (effect_reissue up to 2h), and effect_reissue
// no less than the longer timeout, each one's default standing in when unset.
func TestCallTimeouts(t *testing.T) {
	for in, want := range map[string]time.Duration{"": 0, "100ms": 100 * time.Millisecond, "5m": 5 * time.Minute, "1h": time.Hour} {
		if got, err := ParseCallTimeout(in); err != nil || got != want {
			t.Errorf("ParseCallTimeout(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"abc", "0", "-1s", "99ms", "61m", "1s\n"} {
		if _, err := ParseCallTimeout(in); err == nil {
			t.Errorf("ParseCallTimeout(%q) accepted", in)
		}
	}
	if _, err := ParseEffectReissue("2h"); err != nil {
		t.Errorf("ParseEffectReissue(2h): %v", err)
	}
	if _, err := ParseEffectReissue("121m"); err == nil {
		t.Error("ParseEffectReissue(121m) accepted")
	}
	for _, c := range []struct {
		reissue, model, tool time.Duration
		ok                   bool
	}{
		{0, 0, 0, true},
		{2 * time.Minute, 0, 0, true},
		{2*time.Minute - 1, 0, 0, false},
		{30 * time.Second, 10 * time.Second, 0, true},
		{29 * time.Second, 10 * time.Second, 0, false},
		{5 * time.Minute, time.Minute, 10 * time.Minute, false},
		{10 * time.Minute, time.Minute, 10 * time.Minute, true},
	} {
		if err := CheckEffectReissue(c.reissue, c.model, c.tool); (err == nil) != c.ok {
			t.Errorf("CheckEffectReissue(%v, %v, %v) = %v, want ok %v", c.reissue, c.model, c.tool, err, c.ok)
		}
	}
	if err := (File{ModelTimeout: "2h", ToolTimeout: "0", EffectReissue: "x"}).Validate(); err == nil ||
		!strings.Contains(err.Error(), "model_timeout") || !strings.Contains(err.Error(), "tool_timeout") || !strings.Contains(err.Error(), "effect_reissue") {
		t.Errorf("Validate: %v", err)
	}
}

// A configuration file that does not decode is refused with the line it goes wrong
// on, for an unknown field (also one of a deeper section, or one whose name is also
// another section's value), a value of the wrong type, broken syntax and a file cut
// short.
func TestLoadNamesTheLineOfADecodingError(t *testing.T) {
	for name, c := range map[string]struct{ body, want string }{
		"unknown field": {"{\"model\": \"offline\",\n \"max_steps\": 5,\n \"toolz\": {}}", `line 3: unknown field "toolz"`},
		"unknown deeper field": {"{\"tools\": {\"http_fetch\": {\"allow\": [\"readonly\"]},\n  \"files\": {\"root\": \".\",\n  \"readonly\": true}}}",
			`line 3: unknown field "tools.files.readonly"`},
		"wrong type": {"{\"model\": \"offline\",\n\n \"max_steps\": \"ten\"}", "line 3: max_steps: got string"},
		"syntax":     {"{\"model\": \"offline\",\n \"max_steps\": 3,\n}", "line 3: not valid JSON"},
		"cut short":  {"{\"model\": \"offline\",\n \"tools\": {\"files\": {\"root\": \".\"}}\n", "line 2: the file ends inside the JSON object"},
	} {
		path := filepath.Join(t.TempDir(), "troupe.json")
		if err := os.WriteFile(path, []byte(c.body), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Load(path)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want %q", name, err, c.want)
		}
	}
}

// max_queued_tasks takes 1 to 1,000,000, -1 for no bound, and 0 or nothing for
// the node's default: another value is refused, naming the field, the value and
// the range; a string says what is wanted.
func TestMaxQueuedTasksIsRanged(t *testing.T) {
	for body, want := range map[string]string{
		`{}`:                            "",
		`{"max_queued_tasks": 0}`:       "",
		`{"max_queued_tasks": 1}`:       "",
		`{"max_queued_tasks": 1000000}`: "",
		`{"max_queued_tasks": -1}`:      "",
		`{"max_queued_tasks": -2}`:      "max_queued_tasks: -2 is out of range: want 1 to 1000000, or -1 for no bound (0 or absent: the node's default, 1000)",
		`{"max_queued_tasks": 1000001}`: "max_queued_tasks: 1000001 is out of range",
		`{"max_queued_tasks": "many"}`:  "max_queued_tasks: got string, want an integer from 1 to 1000000, or -1 for no bound",
	} {
		path := filepath.Join(t.TempDir(), "troupe.json")
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		fc, err := Load(path)
		if err == nil {
			err = fc.Validate()
		}
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", body, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: %v; want %q", body, err, want)
		}
	}
}

// A configuration file an editor saved with a byte order mark before its JSON
// is read as its JSON, as every JSON a user sends is (messages.TrimByteOrderMark);
// it was refused as "want a JSON object ({...}), not \ufeff{...".
func TestLoadAfterAByteOrderMark(t *testing.T) {
	path := filepath.Join(t.TempDir(), "troupe.json")
	if err := os.WriteFile(path, []byte("\ufeff{\"max_queued_tasks\": 7}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fc, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if fc.MaxQueuedTasks != 7 {
		t.Fatalf("max_queued_tasks %d, want 7", fc.MaxQueuedTasks)
	}
}
