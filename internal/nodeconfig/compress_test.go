package nodeconfig

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
)

// An agents file's context section takes the compression fields beside its own;
// they reach the node's agent as actors.Compression, and a bad one names its line.
func TestAgentsFileCompression(t *testing.T) {
	f, err := ParseAgents("agents.yaml", []byte(`agents:
  chat:
    context:
      window: 32000
      compression: summary+mask
      keep_turns: 6
      step_turns: 2
      summary_model: none
      facts_block: Facts
`))
	if err != nil {
		t.Fatal(err)
	}
	got := f.NodeAgents()[0].Context.Compression
	want := actors.Compression{Strategy: "summary+mask", Window: 6, Step: 2, Model: actors.NoSummaryModel, MemoryBlock: "facts"}
	if got != want {
		t.Fatalf("compression %+v, want %+v", got, want)
	}
	for _, c := range []struct{ body, want string }{
		{"compression: zip", `line 4: agent "chat": context: unknown compression "zip" in "zip": want one of window, summary`},
		{"compression: summary+window", `line 4: agent "chat": context: compression "summary+window": at most one of window, summary`},
		{"keep_turns: 0", `line 4: agent "chat": context: keep_turns "0": want the latest turns sent verbatim`},
		{"summary_words: many", `line 4: agent "chat": context: summary_words "many"`},
		{"compresion: summary", `line 4: agent "chat": context: unknown field "compresion": the fields are window, reserved_output, history_turns, compression, keep_turns`},
	} {
		_, err := ParseAgents("agents.yaml", []byte("agents:\n  chat:\n    context:\n      "+c.body+"\n"))
		var fe *AgentsFileError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.body, err, c.want)
		}
	}
}

// The configuration file's context section takes them too, for the default agent.
func TestConfigFileCompression(t *testing.T) {
	path := t.TempDir() + "/troupe.json"
	if err := os.WriteFile(path, []byte(`{"context": {"compression": "mask", "observation_tokens": 300}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	fc, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fc.Context.Options().Compression; got != (actors.Compression{Strategy: "mask", ObservationTokens: 300}) {
		t.Fatalf("compression %+v", got)
	}
	if err := os.WriteFile(path, []byte(`{"context": {"compression": "zip"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), `unknown compression "zip"`) {
		t.Fatalf("a bad strategy: %v", err)
	}
}

// An agent's summary_model is resolved like its model: the node serves it as a
// chain of one, and the agent's compression names it.
func TestAgentsFileSummaryModel(t *testing.T) {
	f, err := ParseAgents("agents.yaml", []byte("agents:\n  chat:\n    context:\n      compression: summary\n      summary_model: offline\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.ResolveModels(context.Background(), nil, func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	na := f.NodeAgents()[0]
	if na.SummaryModel == nil || na.SummaryModel.Name() != "offline" || na.Context.Compression.Model != "offline" {
		t.Fatalf("summary model %v, compression %+v", na.SummaryModel, na.Context.Compression)
	}
	if _, err := ParseAgents("agents.yaml", []byte("agents:\n  chat:\n    context:\n      summary_model: auto\n")); err == nil || !strings.Contains(err.Error(), "line 4") {
		t.Fatalf("summary_model auto: %v, want an error on line 4", err)
	}
	path := t.TempDir() + "/troupe.json"
	if err := os.WriteFile(path, []byte(`{"context": {"compression": "summary", "summary_model": "openai:gpt-4o-mini"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "takes none only") {
		t.Fatalf("a configuration file's summary model: %v", err)
	}
}

// step_turns is at most keep_turns (its default 8 when absent): the window keeps
// up to keep_turns+step_turns-1 turns, so a larger step sent many more than
// keep_turns said. An agents file names the line, a configuration file the field.
func TestStepTurnsAtMostKeepTurns(t *testing.T) {
	for _, c := range []struct {
		body string
		line int
		want string
	}{
		{"keep_turns: 4\n      step_turns: 50", 6, "step_turns 50 is more than keep_turns 4"},
		{"step_turns: 50\n      keep_turns: 4", 6, "step_turns 50 is more than keep_turns 4"},
		{"step_turns: 9", 5, "step_turns 9 is more than keep_turns (its default) 8"},
	} {
		_, err := ParseAgents("agents.yaml", []byte("agents:\n  chat:\n    context:\n      compression: window\n      "+c.body+"\n"))
		var fe *AgentsFileError
		if !errors.As(err, &fe) || fe.Line != c.line || !strings.Contains(fe.Msg, `agent "chat": context: `+c.want) || !strings.Contains(fe.Msg, "at most keep_turns") {
			t.Errorf("%q: err = %v, want line %d and %q", c.body, err, c.line, c.want)
		}
	}
	for _, body := range []string{"keep_turns: 4\n      step_turns: 4", "step_turns: 8", "keep_turns: 2\n      step_turns: 1"} {
		if _, err := ParseAgents("agents.yaml", []byte("agents:\n  chat:\n    context:\n      compression: window\n      "+body+"\n")); err != nil {
			t.Errorf("%q: %v", body, err)
		}
	}
	path := t.TempDir() + "/troupe.json"
	if err := os.WriteFile(path, []byte(`{"context": {"compression": "window", "keep_turns": 4, "step_turns": 50}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "context: step_turns 50 is more than keep_turns 4") {
		t.Fatalf("the configuration file's step_turns over keep_turns: %v", err)
	}
}

// The configuration file's compression integers take the range an agents file's
// do, and an error names the field.
func TestConfigFileCompressionRanges(t *testing.T) {
	path := t.TempDir() + "/troupe.json"
	for body, want := range map[string]string{
		`{"keep_turns": 99999999999}`: "context: keep_turns 99999999999: want an integer from 1 to 10000000",
		`{"summary_words": -5}`:       "context: summary_words -5: want an integer from 1 to 10000000",
	} {
		if err := os.WriteFile(path, []byte(`{"context": `+strings.Replace(body, "{", `{"compression": "summary", `, 1)+`}`), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(path); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", body, err, want)
		}
	}
}

// A compression setting without compression did nothing (the conversation was sent
// whole, or a named agent took the default agent's compression, settings and all):
// it is refused, naming the field (an agents file its line too) and what it needs.
func TestCompressionSettingWithoutStrategy(t *testing.T) {
	for _, c := range []struct {
		body  string
		line  int
		field string
	}{
		{"keep_turns: 2", 4, "keep_turns"},
		{"window: 32000\n      step_turns: 1", 5, "step_turns"},
		{"observation_tokens: 300", 4, "observation_tokens"},
		{"facts_block: facts", 4, "facts_block"},
	} {
		_, err := ParseAgents("agents.yaml", []byte("agents:\n  chat:\n    context:\n      "+c.body+"\n"))
		var fe *AgentsFileError
		if !errors.As(err, &fe) || fe.Line != c.line || !strings.Contains(fe.Msg, `agent "chat": context: `+c.field+" is given without compression") ||
			!strings.Contains(fe.Msg, "set compression too") {
			t.Errorf("%q: err = %v, want line %d naming %s", c.body, err, c.line, c.field)
		}
	}
	// With compression, or summary_model alone (it names the summary model of the
	// compression the agent takes), the section is taken.
	for _, body := range []string{"compression: window\n      keep_turns: 2", "summary_model: none"} {
		if _, err := ParseAgents("agents.yaml", []byte("agents:\n  chat:\n    context:\n      "+body+"\n")); err != nil {
			t.Errorf("%q: %v", body, err)
		}
	}
	path := t.TempDir() + "/troupe.json"
	if err := os.WriteFile(path, []byte(`{"context": {"window": 32000, "keep_turns": 2}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "context: keep_turns is given without compression") {
		t.Fatalf("the configuration file's keep_turns without compression: %v", err)
	}
	if err := os.WriteFile(path, []byte(`{"context": {"window": 32000, "compression": "window", "keep_turns": 2}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if fc, err := Load(path); err != nil || fc.Context.Options().Compression.Window != 2 {
		t.Fatalf("keep_turns with compression: %v", err)
	}
}
