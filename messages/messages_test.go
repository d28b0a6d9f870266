package messages_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/troupe-run/troupe/messages"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ (only when a schema change is intended)")

// samples holds one fully populated value of every payload type. The golden file of
// each is testdata/<type>.json; regenerate with `go test ./messages -update`.
func samples() []messages.Payload {
	usage := messages.Usage{PromptTokens: 120, CompletionTokens: 30, CachedTokens: 64, CostUSD: 0.00042}
	return []messages.Payload{
		&messages.TaskSubmitted{Input: "What is 12 * (7 + 5)?", Agent: "default", Model: "offline", MaxSteps: 8, DeadlineUS: 1767225600000000, ReplyTopic: "replies",
			Memory: "<human description=\"what the agent knows of the person it talks with\" chars=\"14/2000\">\nLives in Oslo.\n</human>\n",
			Parent: &messages.ParentRef{SessionID: "s-0", Key: "s-0/5", Depth: 1}},
		&messages.ModelRequested{Key: "s-1/m/2", Model: "offline", Step: 1, Messages: 2, PromptHash: "9f86d081884c7d65", Tools: []string{"calculator", "clock"},
			Context: &messages.ContextReport{Window: 8000, Reserved: 1000, System: 340, Budget: 6660, Used: 6650, Older: 3,
				Kept:      []messages.ContextItem{{ID: "system", Kind: "system", Tokens: 340, Score: 1}, {ID: "task", Kind: "task", Tokens: 6600, From: 9000, Score: 1}, {ID: "turn/4", Kind: "turn", Tokens: 50, Score: 0.75}},
				Dropped:   []messages.ContextItem{{ID: "turn/3", Kind: "turn", Tokens: 700, Score: 0.5, Reason: "budget"}},
				Truncated: []messages.ContextItem{{ID: "task", Kind: "task", Tokens: 6600, From: 9000, Score: 1}},
				Summarize: []string{"turn/3"}}},
		&messages.ModelResponded{Key: "s-1/m/2", Model: "offline", Message: messages.ChatMessage{
			Role: messages.RoleAssistant, ToolCalls: []messages.ToolCall{{ID: "call_1", Name: "calculator", Arguments: `{"expression":"12 * (7 + 5)"}`}},
		}, Usage: usage, LatencyUS: 812, Cached: true},
		&messages.ModelDelta{Key: "s-1/4", Step: 1, Seq: 7, Attempt: 2, Reset: true, Content: "The answer",
			ToolCallIndex: 1, ToolCallID: "call_2", ToolName: "calculator", Arguments: `{"expr`},
		&messages.ToolCallRequested{Key: "s-1/t/call_1", CallID: "call_1", Tool: "calculator", Arguments: `{"expression":"12 * (7 + 5)"}`, Step: 1,
			Chain: "s-1/5", ChainStep: "multiply"},
		&messages.ToolCallCompleted{Key: "s-1/t/call_1", CallID: "call_1", Tool: "calculator", Result: "144", Error: "", LatencyUS: 35},
		&messages.TaskCompleted{Output: "144", Steps: 2, Usage: usage},
		&messages.TaskFailed{Reason: messages.ReasonMaxSteps, Error: "stopped after 8 steps", Steps: 8, Usage: usage},
		&messages.SessionForked{ParentID: "s-0", AtSeq: 6},
		&messages.TeamStateUpdated{Section: "calculator", Op: messages.TeamOpMerge, Key: "answer", Value: "144", By: "calculator"},
		&messages.NoteAdded{Key: "s-1/9", NoteID: "n3", Type: "fact", Tags: []string{"paris", "travel"}, Body: "The museum closes on Tuesdays."},
		&messages.NoteUpdated{Key: "s-1/12", NoteID: "n3", Type: ptr("decision"), Tags: &[]string{}, Body: ptr("Go on Wednesday.")},
		&messages.NoteRemoved{Key: "s-1/15", NoteID: "n3"},
		&messages.A2APushSet{ConfigID: "cfg-1", URL: "https://hooks.example.com/a2a", Schemes: []string{"Bearer"}, HadToken: true, HadCredentials: true},
		&messages.A2APushDeleted{ConfigID: "cfg-1"},
		&messages.A2APushFinal{ConfigID: "cfg-1", State: "completed", Status: 204},
		&messages.UISignedIn{TokenMAC: "5e1f", CSRFHash: "9a0c", ExpiresUS: 1_767_225_600_000_000},
		&messages.UISignedOut{Reason: "logout"},
		&messages.MCPLevelSet{Level: "info"},
		&messages.MCPSubscribed{URI: "skill://review/checklist.md"},
		&messages.MCPUnsubscribed{URI: "skill://review/checklist.md"},
		&messages.MCPCallStarted{RequestID: "7", Stream: "M3X5ZK2QGQ3S5LBW2VYJXQ6ZIY", ArgsHash: "6b86b273ff34fce19d6b804eff5a3f5747ada4eaa22f1d49c01e52ddb7875b4b", TaskSession: "mcp-K2QGQ3S5LBW2VYJXQ6ZIYM3X5Z"},
		&messages.MCPSessionKept{},
		&messages.MCPSessionEnded{},
		&messages.BusStored{Message: json.RawMessage(`{"v":1,"session_id":"s-1","key":"s-1/6","output":"a reply too large for the bus"}`)},
		&messages.MemoryAdded{Key: "s-1/t/call_2", Reason: "added by the memory tool", Memory: memorySample()},
		&messages.MemoryUpdated{Key: "s-1/t/call_3", Reason: "newer fact about the same subject", Memory: memorySample()},
		&messages.MemoryMerged{Key: "consolidate/2", Reason: "semantic duplicate (cosine 0.97 >= 0.92)", Merged: []string{"m8"}, Memory: memorySample()},
		&messages.MemoryPromoted{Key: "consolidate/3", Reason: "importance 0.8 > 0.7", From: "working", Memory: memorySample()},
		&messages.MemoryDistilled{Key: "consolidate/4", Reason: "summary of 3 episodes", Memory: memorySample()},
		&messages.MemoryInvalidated{Key: "consolidate/5", Reason: "contradicted by a newer fact", MemoryID: "m2", By: "m7", AtUS: 1767225600000000},
		&messages.MemoryForgotten{Key: "consolidate/6", Reason: "capacity 50: least valuable", MemoryIDs: []string{"m1", "m4"}},
		&messages.MemoryCleared{Key: "s-1/t/call_9", Reason: "clear_all by the memory tool", Tier: "working"},
		&messages.MemoryBlockSet{Key: "s-1/t/call_4", Reason: "core_memory_append", Label: "human", Value: "Name: Alice. Likes tea.", Limit: 2000, Description: "what the agent knows of its user"},
		&messages.MemoryBlockDeleted{Key: "s-1/t/call_5", Reason: "deleted by the memory tool", Label: "project"},
		&messages.MemoryRemembered{Key: "s-1/10/01J0000000000000000000000task", Reason: "remembered: nothing to keep: 2 facts, each NONE", Facts: 2},
		&messages.KBDocumentIngested{Key: "ingest/docs/guide.md", Reason: "changed", Source: "docs/guide.md", Hash: "2c26b46b68ffc68f",
			Bytes: 2048, MarkdownBytes: 1980, Embedder: "e5-passage", Chunks: []messages.KBChunk{
				{ChunkID: "c_9f2a", Index: 0, HeadingPath: []string{"# Guide", "## Install"}, Start: 0, End: 812, Tokens: 180,
					Hash: "fcde2b2edba56bf4", Text: "Run the installer.", Vector: messages.Vector{0.25, -0.5, 1, 0}},
				{ChunkID: "c_77b1", Index: 1, Start: 700, End: 1980, Tokens: 240, Hash: "e3b0c44298fc1c14", Text: "Then start the node."},
			}},
		&messages.KBDocumentRemoved{Key: "remove/docs/old.md", Reason: "removed by the user", Source: "docs/old.md"},
	}
}

func ptr[T any](v T) *T { return &v }

func memorySample() messages.MemoryRecord {
	return messages.MemoryRecord{
		MemoryID: "m7", Tier: "semantic", Modality: "text", Content: "Alice lives in Paris.", URI: "", Importance: 0.8,
		AtUS: 1767225600000000, Hash: "5d41402abc4b2a76", Vector: messages.Vector{0.25, -0.5, 1, 0}, Embedder: "e5-passage",
		Metadata: json.RawMessage(`{"source":"chat","lang":"en"}`), Participants: []string{"alice", "agent"}, Outcome: "answered",
		Entities: []string{"alice", "paris"}, Relations: []messages.MemoryRelation{{From: "alice", Type: "lives_in", To: "paris"}},
		Sources: []messages.MemorySource{{Kind: "session", ID: "s-1", Seq: 4}, {Kind: "memory", ID: "m8", Detail: json.RawMessage(`{"lang":"en"}`)}},
	}
}

func envelope(t *testing.T, p messages.Payload) messages.Envelope {
	t.Helper()
	e, err := messages.NewEnvelope(p)
	if err != nil {
		t.Fatal(err)
	}
	e.ID = "01J0000000000000000000000" + string(p.MessageType())
	e.SessionID = "s-1"
	e.Seq = 7
	e.CausationID = "cause-1"
	e.CorrelationID = "task-1"
	e.TS = 1767225600123456
	e.Actor = "session"
	return e
}

func TestGoldenEncoding(t *testing.T) {
	for _, p := range samples() {
		t.Run(string(p.MessageType()), func(t *testing.T) {
			e := envelope(t, p)
			got, err := messages.Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", string(p.MessageType())+".json")
			if *update {
				if err := os.WriteFile(path, append(got, '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("golden file: %v (run go test ./messages -update once to create it)", err)
			}
			if !bytes.Equal(got, bytes.TrimSpace(want)) {
				t.Fatalf("encoding changed for %s:\n got %s\nwant %s\nA changed encoding breaks replay of recorded sessions: bump the schema version instead.", p.MessageType(), got, want)
			}
			// The golden bytes decode back to exactly the sample.
			back, err := messages.Unmarshal(want)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back, e) {
				t.Fatalf("envelope round trip:\n got %+v\nwant %+v", back, e)
			}
			dec, err := back.Decode()
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(dec, p) {
				t.Fatalf("payload round trip:\n got %+v\nwant %+v", dec, p)
			}
		})
	}
}

func TestEveryTypeHasAGoldenSample(t *testing.T) {
	seen := map[messages.Type]bool{}
	for _, p := range samples() {
		seen[p.MessageType()] = true
	}
	for _, typ := range []messages.Type{
		messages.TypeTaskSubmitted, messages.TypeModelRequested, messages.TypeModelResponded, messages.TypeModelDelta,
		messages.TypeToolCallRequested, messages.TypeToolCallCompleted, messages.TypeTaskCompleted, messages.TypeTaskFailed, messages.TypeSessionForked,
		messages.TypeTeamStateUpdated,
		messages.TypeNoteAdded, messages.TypeNoteUpdated, messages.TypeNoteRemoved,
		messages.TypeMemoryAdded, messages.TypeMemoryUpdated, messages.TypeMemoryMerged, messages.TypeMemoryPromoted, messages.TypeMemoryDistilled,
		messages.TypeMemoryInvalidated, messages.TypeMemoryForgotten, messages.TypeMemoryCleared, messages.TypeMemoryBlockSet, messages.TypeMemoryBlockDeleted,
		messages.TypeMemoryRemembered,
		messages.TypeKBDocumentIngested, messages.TypeKBDocumentRemoved,
		messages.TypeA2APushSet, messages.TypeA2APushDeleted, messages.TypeA2APushFinal,
		messages.TypeUISignedIn, messages.TypeUISignedOut,
		messages.TypeBusStored,
		messages.TypeMCPLevelSet, messages.TypeMCPSubscribed, messages.TypeMCPUnsubscribed, messages.TypeMCPCallStarted,
		messages.TypeMCPSessionKept, messages.TypeMCPSessionEnded,
	} {
		if _, ok := messages.CurrentVersion(typ); !ok {
			t.Errorf("%s has no schema version", typ)
		}
		if !seen[typ] {
			t.Errorf("%s has no golden sample", typ)
		}
	}
}

func TestBadInput(t *testing.T) {
	good := envelope(t, &messages.TaskCompleted{Output: "x"})
	cases := map[string]struct {
		edit func(*messages.Envelope)
		raw  string
		want error
	}{
		"truncated":      {raw: `{"id":"a","session_id":"s","seq":1,"type":"task.completed","v":1,"payload":{"out`, want: messages.ErrCorrupt},
		"trailing data":  {raw: `{"id":"a","session_id":"s","seq":1,"type":"task.completed","v":1,"ts":1,"actor":"x","payload":{}} {}`, want: messages.ErrCorrupt},
		"missing id":     {edit: func(e *messages.Envelope) { e.ID = "" }, want: messages.ErrCorrupt},
		"missing sess":   {edit: func(e *messages.Envelope) { e.SessionID = "" }, want: messages.ErrCorrupt},
		"unknown type":   {edit: func(e *messages.Envelope) { e.Type = "task.teleported" }, want: messages.ErrUnknownType},
		"future version": {edit: func(e *messages.Envelope) { e.Version = 99 }, want: messages.ErrFutureVersion},
		"wrong payload":  {edit: func(e *messages.Envelope) { e.Payload = json.RawMessage(`{"output":17}`) }, want: messages.ErrCorrupt},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			raw := []byte(c.raw)
			if c.edit != nil {
				e := good
				c.edit(&e)
				b, err := json.Marshal(e) // bypass Marshal's validation to produce bad bytes
				if err != nil {
					t.Fatal(err)
				}
				raw = b
			}
			e, err := messages.Unmarshal(raw)
			if err == nil {
				_, err = e.Decode()
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
}

func TestFutureVersionErrorNamesSessionAndSeq(t *testing.T) {
	e := envelope(t, &messages.TaskCompleted{Output: "x"})
	e.Version = 2
	_, err := e.Decode()
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("session s-1 seq 7")) {
		t.Fatalf("error should name session and seq: %v", err)
	}
}

func TestVectorRejectsBadEncodings(t *testing.T) {
	for name, raw := range map[string]string{
		"number array": `[0.5, 1]`,
		"not base64":   `"%%%"`,
		"odd length":   `"AAAA AA=="`,
		"three bytes":  `"AAAA"`[:0] + `"AAEC"`,
	} {
		var v messages.Vector
		if err := json.Unmarshal([]byte(raw), &v); err == nil {
			t.Errorf("%s: %s decoded to %v, want an error", name, raw, v)
		}
	}
	var v messages.Vector
	if err := json.Unmarshal([]byte(`null`), &v); err != nil || v != nil {
		t.Fatalf("null: %v %v", v, err)
	}
}

// A task.submitted recorded before TaskSubmitted had Memory and Parent decodes with
// neither, and encodes back to the same bytes: old sessions replay as they ran.
func TestTaskSubmittedWithoutMemory(t *testing.T) {
	old := `{"id":"t-1","session_id":"s-1","seq":1,"type":"task.submitted","v":1,"ts":1767225600123456,"actor":"ingress","payload":{"input":"hi","agent":"default"}}`
	env, err := messages.Unmarshal([]byte(old))
	if err != nil {
		t.Fatal(err)
	}
	p, err := env.Decode()
	if err != nil {
		t.Fatal(err)
	}
	ts := p.(*messages.TaskSubmitted)
	if ts.Memory != "" || ts.Parent != nil || ts.Input != "hi" {
		t.Fatalf("decoded %+v", ts)
	}
	b, err := json.Marshal(ts)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"input":"hi","agent":"default"}` {
		t.Fatalf("re-encoded as %s", b)
	}
}
