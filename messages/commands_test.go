package messages_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/troupe-run/troupe/messages"
)

// TestCommandGolden pins the encoding of the internal commands nodes exchange: nodes
// of two builds talk through them during a rolling upgrade.
func TestCommandGolden(t *testing.T) {
	msg := messages.ChatMessage{Role: messages.RoleAssistant, Content: "144"}
	cases := []struct {
		name   string
		cmd    messages.Command
		decode func([]byte) (any, error)
	}{
		{"effect.request.tool", &messages.EffectRequest{SessionID: "s-1", Key: messages.EffectKey{SessionID: "s-1", Seq: 5}, ReplyTopic: messages.TopicReplies, ReplyNode: "node-a",
			Tool: &messages.ToolCallRequested{Key: "s-1/5", CallID: "call_1", Tool: "calculator", Arguments: `{"expression":"2+2"}`, Step: 1}},
			func(b []byte) (any, error) { r, err := messages.DecodeEffectRequest(b); return &r, err }},
		{"effect.request.model", &messages.EffectRequest{SessionID: "s-1", Key: messages.EffectKey{SessionID: "s-1", Seq: 3}, ReplyTopic: messages.TopicReplies, ReplyNode: "node-a",
			Model: &messages.ModelCall{Step: 1, Messages: []messages.ChatMessage{{Role: messages.RoleUser, Content: "2+2?"}},
				Tools: []messages.ToolSpec{{Name: "calculator", Description: "evaluates"}}, Agent: "default", Team: "t", ScopeKey: "k", NoCache: true}},
			func(b []byte) (any, error) { r, err := messages.DecodeEffectRequest(b); return &r, err }},
		{"effect.reply", &messages.EffectReply{SessionID: "s-1", Key: messages.EffectKey{SessionID: "s-1", Seq: 3}, Model: "offline", Message: &msg,
			Usage: messages.Usage{PromptTokens: 10, CompletionTokens: 2}, Cached: true, LatencyUS: 812},
			func(b []byte) (any, error) { r, err := messages.DecodeEffectReply(b); return &r, err }},
		{"effect.cancel", &messages.EffectCancel{SessionID: "s-1", Key: messages.EffectKey{SessionID: "s-1", Seq: 5}},
			func(b []byte) (any, error) { r, err := messages.DecodeEffectCancel(b); return &r, err }},
		{"task.cancel", &messages.CancelRequest{SessionID: "s-1", Reason: "user asked"},
			func(b []byte) (any, error) { r, err := messages.DecodeCancelRequest(b); return &r, err }},
		{"memory.command", &messages.MemoryCommand{ID: "c-1", SessionID: "memory/user:alice", Namespace: "user:alice", Action: "search",
			Key: "http/k1", Args: json.RawMessage(`{"text":"tea","limit":5}`), ReplyTopic: messages.TopicReplies, ReplyNode: "node-a"},
			func(b []byte) (any, error) { r, err := messages.DecodeMemoryCommand(b); return &r, err }},
		{"deltas.batch", &messages.DeltaBatch{SessionID: "s-1", Node: "node-b", Deltas: []messages.ModelDelta{
			{Key: "s-1/3", Step: 1, Seq: 1, Attempt: 1, Content: "14"}, {Key: "s-1/3", Step: 1, Seq: 2, Attempt: 1, Content: "4"}},
			End: &messages.DeltaEnd{Key: "s-1/3", Sent: 2}},
			func(b []byte) (any, error) { r, err := messages.DecodeDeltaBatch(b); return &r, err }},
		{"deltas.watch", &messages.DeltaWatch{SessionID: "s-1", Node: "api-1", TTLMS: 15000},
			func(b []byte) (any, error) { r, err := messages.DecodeDeltaWatch(b); return &r, err }},
		{"deltas.owners", &messages.DeltaOwners{Node: "node-a", Partitions: []int{0, 3}, Total: 6},
			func(b []byte) (any, error) { r, err := messages.DecodeDeltaOwners(b); return &r, err }},
		{"memory.reply", &messages.MemoryReply{ID: "c-1", Result: json.RawMessage(`{"ids":["m_1"]}`), Error: "", Kind: ""},
			func(b []byte) (any, error) { r, err := messages.DecodeMemoryReply(b); return &r, err }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := messages.EncodeCommand(c.cmd)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", "command."+c.name+".json")
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
				t.Fatalf("encoding changed:\n got %s\nwant %s", got, want)
			}
			back, err := c.decode(want)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back, c.cmd) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", back, c.cmd)
			}
		})
	}
}

func TestMemoryCommandRejects(t *testing.T) {
	for name, b := range map[string]string{
		"no id":                    `{"v":1,"session_id":"memory/a","namespace":"a","action":"add","reply_topic":"r","reply_node":"n"}`,
		"no action":                `{"v":1,"id":"c","session_id":"memory/a","namespace":"a","reply_topic":"r","reply_node":"n"}`,
		"another stream":           `{"v":1,"id":"c","session_id":"memory/b","namespace":"a","action":"add","reply_topic":"r","reply_node":"n"}`,
		"no reply node":            `{"v":1,"id":"c","session_id":"memory/a","namespace":"a","action":"add","reply_topic":"r"}`,
		"future version":           `{"v":99,"id":"c","session_id":"memory/a","namespace":"a","action":"add","reply_topic":"r","reply_node":"n"}`,
		"trailing object":          `{"v":1,"id":"c","session_id":"memory/a","namespace":"a","action":"add","reply_topic":"r","reply_node":"n"} {}`,
		"kb stream, memory action": `{"v":1,"id":"c","session_id":"kb/a","namespace":"a","action":"add","reply_topic":"r","reply_node":"n"}`,
		"kb action, another base":  `{"v":1,"id":"c","session_id":"kb/b","namespace":"a","action":"kb_add","reply_topic":"r","reply_node":"n"}`,
		"notes, another agent":     `{"v":1,"id":"c","session_id":"notes/b","namespace":"a","action":"notes","reply_topic":"r","reply_node":"n"}`,
		"notes stream, memory op":  `{"v":1,"id":"c","session_id":"notes/a","namespace":"a","action":"add","reply_topic":"r","reply_node":"n"}`,
	} {
		if _, err := messages.DecodeMemoryCommand([]byte(b)); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
	// A knowledge base's command: its stream, an action of its own.
	if c, err := messages.DecodeMemoryCommand([]byte(`{"v":1,"id":"c","session_id":"kb/docs","namespace":"docs","action":"kb_add","reply_topic":"r","reply_node":"n"}`)); err != nil || c.SessionID != "kb/docs" {
		t.Errorf("a knowledge base's command: %+v %v", c, err)
	}
	// An agent's notes: their stream, the action notes.
	if c, err := messages.DecodeMemoryCommand([]byte(`{"v":1,"id":"c","session_id":"notes/default","namespace":"default","action":"notes","reply_topic":"r","reply_node":"n"}`)); err != nil || c.SessionID != "notes/default" {
		t.Errorf("a change to an agent's notes: %+v %v", c, err)
	}
	if _, err := messages.DecodeMemoryReply([]byte(`{"v":1}`)); err == nil {
		t.Error("reply without id decoded")
	}
}

func TestDeltaCommandsReject(t *testing.T) {
	for name, b := range map[string]string{
		"no deltas":        `{"v":1,"session_id":"s","node":"n","deltas":[]}`,
		"another's call":   `{"v":1,"session_id":"s","node":"n","deltas":[{"key":"t/3","step":1,"seq":1,"attempt":1}]}`,
		"no seq":           `{"v":1,"session_id":"s","node":"n","deltas":[{"key":"s/3","step":1,"attempt":1}]}`,
		"future version":   `{"v":99,"session_id":"s","node":"n","deltas":[{"key":"s/3","step":1,"seq":1,"attempt":1}]}`,
		"no session":       `{"v":1,"node":"n","deltas":[{"key":"s/3","step":1,"seq":1,"attempt":1}]}`,
		"malformed key":    `{"v":1,"session_id":"s","node":"n","deltas":[{"key":"s/x","step":1,"seq":1,"attempt":1}]}`,
		"trailing objects": `{"v":1,"session_id":"s","node":"n","deltas":[{"key":"s/3","step":1,"seq":1,"attempt":1}]} {}`,
		"another's end":    `{"v":1,"session_id":"s","node":"n","deltas":[],"end":{"key":"t/3","sent":1}}`,
	} {
		if _, err := messages.DecodeDeltaBatch([]byte(b)); err == nil {
			t.Errorf("delta batch %s: decoded", name)
		}
	}
	for name, b := range map[string]string{
		"no session": `{"v":1,"node":"n","ttl_ms":1000}`,
		"no ttl":     `{"v":1,"session_id":"s","node":"n"}`,
	} {
		if _, err := messages.DecodeDeltaWatch([]byte(b)); err == nil {
			t.Errorf("delta watch %s: decoded", name)
		}
	}
	for name, b := range map[string]string{
		"no partitions":    `{"v":1,"node":"n","partitions":[],"total":6}`,
		"out of the topic": `{"v":1,"node":"n","partitions":[6],"total":6}`,
	} {
		if _, err := messages.DecodeDeltaOwners([]byte(b)); err == nil {
			t.Errorf("delta owners %s: decoded", name)
		}
	}
}

func TestCommandRejects(t *testing.T) {
	bad := map[string]string{
		"not json":          `{"v":1,`,
		"trailing data":     `{"v":1,"session_id":"s","key":"s/1","reply_topic":"r","reply_node":"n","tool":{"key":"s/1","tool":"x"}} {}`,
		"no key":            `{"v":1,"session_id":"s","reply_topic":"r","reply_node":"n","tool":{"key":"s/1","tool":"x"}}`,
		"no reply node":     `{"v":1,"session_id":"s","key":"s/1","reply_topic":"r","tool":{"key":"s/1","tool":"x"}}`,
		"tool and model":    `{"v":1,"session_id":"s","key":"s/1","reply_topic":"r","reply_node":"n","tool":{"key":"s/1","tool":"x"},"model":{"step":1,"messages":[]}}`,
		"neither":           `{"v":1,"session_id":"s","key":"s/1","reply_topic":"r","reply_node":"n"}`,
		"malformed key":     `{"v":1,"session_id":"s","key":"s/01","reply_topic":"r","reply_node":"n","tool":{"key":"s/01","tool":"x"}}`,
		"another's key":     `{"v":1,"session_id":"s","key":"t/1","reply_topic":"r","reply_node":"n","tool":{"key":"t/1","tool":"x"}}`,
		"tool key mismatch": `{"v":1,"session_id":"s","key":"s/1","reply_topic":"r","reply_node":"n","tool":{"key":"s/9","tool":"x"}}`,
	}
	for name, b := range bad {
		if _, err := messages.DecodeEffectRequest([]byte(b)); !errors.Is(err, messages.ErrCorrupt) {
			t.Errorf("%s: err = %v, want ErrCorrupt", name, err)
		}
	}
	future := `{"v":2,"session_id":"s","key":"s/1","reply_topic":"r","reply_node":"n","tool":{"key":"s/1","tool":"x"}}`
	if _, err := messages.DecodeEffectRequest([]byte(future)); !errors.Is(err, messages.ErrFutureVersion) {
		t.Errorf("future version: err = %v, want ErrFutureVersion", err)
	}
	if _, err := messages.DecodeEffectReply([]byte(`{"v":1,"key":"s/1"}`)); !errors.Is(err, messages.ErrCorrupt) {
		t.Errorf("reply without session: err = %v", err)
	}
	if _, err := messages.DecodeEffectReply([]byte(`{"v":1,"session_id":"s","key":"t/1"}`)); !errors.Is(err, messages.ErrCorrupt) {
		t.Errorf("reply with another session's key: err = %v", err)
	}
	if _, err := messages.DecodeCancelRequest([]byte(`{"v":1}`)); !errors.Is(err, messages.ErrCorrupt) {
		t.Errorf("cancel without session: err = %v", err)
	}
	for name, b := range map[string]string{
		"no key":        `{"v":1,"session_id":"s"}`,
		"another's key": `{"v":1,"session_id":"s","key":"t/1"}`,
		"malformed key": `{"v":1,"session_id":"s","key":"s/x"}`,
	} {
		if _, err := messages.DecodeEffectCancel([]byte(b)); !errors.Is(err, messages.ErrCorrupt) {
			t.Errorf("effect cancel, %s: err = %v, want ErrCorrupt", name, err)
		}
	}
}

// TestStoredEffectReferences: a reference names the log stream of its own key and kind and
// carries no call; the stored event gives back the command it holds.
func TestStoredEffectReferences(t *testing.T) {
	key := messages.EffectKey{SessionID: "s", Seq: 4}
	req := `{"v":1,"session_id":"s","key":"s/4","reply_topic":"r","reply_node":"n","stored":"bus/request/s/4"}`
	if r, err := messages.DecodeEffectRequest([]byte(req)); err != nil || r.Stored != messages.EffectStream(messages.BusStoredRequest, key) {
		t.Fatalf("request reference: %+v, %v", r, err)
	}
	rep := `{"v":1,"session_id":"s","key":"s/4","stored":"bus/reply/s/4"}`
	if r, err := messages.DecodeEffectReply([]byte(rep)); err != nil || r.Stored != "bus/reply/s/4" {
		t.Fatalf("reply reference: %+v, %v", r, err)
	}
	for name, b := range map[string]string{
		"another key's stream":    `{"v":1,"session_id":"s","key":"s/4","reply_topic":"r","reply_node":"n","stored":"bus/request/s/5"}`,
		"the reply's stream":      `{"v":1,"session_id":"s","key":"s/4","reply_topic":"r","reply_node":"n","stored":"bus/reply/s/4"}`,
		"a session's stream":      `{"v":1,"session_id":"s","key":"s/4","reply_topic":"r","reply_node":"n","stored":"s"}`,
		"a reference with a call": `{"v":1,"session_id":"s","key":"s/4","reply_topic":"r","reply_node":"n","stored":"bus/request/s/4","tool":{"key":"s/4","tool":"x"}}`,
		"no reply node":           `{"v":1,"session_id":"s","key":"s/4","reply_topic":"r","stored":"bus/request/s/4"}`,
	} {
		if _, err := messages.DecodeEffectRequest([]byte(b)); !errors.Is(err, messages.ErrCorrupt) {
			t.Errorf("request, %s: err = %v, want ErrCorrupt", name, err)
		}
	}
	if _, err := messages.DecodeEffectReply([]byte(`{"v":1,"session_id":"s","key":"s/4","stored":"bus/request/s/4"}`)); !errors.Is(err, messages.ErrCorrupt) {
		t.Errorf("reply reference naming the request's stream: err = %v, want ErrCorrupt", err)
	}

	command := []byte(`{"v":1,"session_id":"s","key":"s/4","output":"long"}`)
	stream := messages.EffectStream(messages.BusStoredReply, key)
	e, err := messages.BusStoredEvent(stream, command, 1_000)
	if err != nil {
		t.Fatal(err)
	}
	if e.ID != stream || e.SessionID != stream || e.Seq != 1 || e.Type != messages.TypeBusStored {
		t.Fatalf("stored event %+v", e)
	}
	got, err := messages.BusStoredMessage(stream, []messages.Envelope{e})
	if err != nil || string(got) != string(command) {
		t.Fatalf("BusStoredMessage = %s, %v", got, err)
	}
	if _, err := messages.BusStoredMessage(stream, nil); err == nil {
		t.Error("BusStoredMessage of no events: no error")
	}
	other, err := messages.NewEnvelope(&messages.TaskCompleted{Output: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := messages.BusStoredMessage(stream, []messages.Envelope{other}); !errors.Is(err, messages.ErrCorrupt) {
		t.Errorf("BusStoredMessage of a task.completed: err = %v, want ErrCorrupt", err)
	}
}
