package node_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// v1StreamResponse is A2A 1.0's StreamResponse as a push notification carries
// it (the official SDKs, Python's and JavaScript's, post one): one of task,
// message, statusUpdate or artifactUpdate, here the task, in 1.0's JSON (no
// "kind", states named TASK_STATE_*). It is decoded strictly: a member 1.0 does
// not have is an error, as a proto-JSON parser makes it.
type v1StreamResponse struct {
	Task *struct {
		ID        string `json:"id"`
		ContextID string `json:"contextId"`
		Status    struct {
			State     string          `json:"state"`
			Message   json.RawMessage `json:"message"`
			Timestamp string          `json:"timestamp"`
		} `json:"status"`
		Artifacts []struct {
			ArtifactID string `json:"artifactId"`
			Name       string `json:"name"`
			Parts      []struct {
				Text     *string        `json:"text"`
				Metadata map[string]any `json:"metadata"`
			} `json:"parts"`
			Metadata map[string]any `json:"metadata"`
		} `json:"artifacts"`
		History  []json.RawMessage `json:"history"`
		Metadata map[string]any    `json:"metadata"`
	} `json:"task"`
}

// bodyHook is a webhook that keeps the bodies it is posted, by path.
type bodyHook struct {
	mu     sync.Mutex
	bodies map[string][][]byte
}

func newBodyHook(t *testing.T) (*bodyHook, string) {
	h := &bodyHook{bodies: map[string][][]byte{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		defer h.mu.Unlock()
		h.bodies[r.URL.Path] = append(h.bodies[r.URL.Path], b)
	}))
	t.Cleanup(srv.Close)
	return h, srv.URL
}

func (h *bodyHook) got(path string) [][]byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([][]byte(nil), h.bodies[path]...)
}

// truncated is s cut at n bytes.
func truncated(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// postJSONRPC posts a JSON-RPC request to url and decodes its answer.
func postJSONRPC(t *testing.T, url, method string, params any) map[string]any {
	t.Helper()
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	if out["error"] != nil {
		t.Fatalf("%s: %v", method, out["error"])
	}
	return out
}

// A push notification speaks the A2A version its config was set in: a config set
// by a 1.0 client (in SendMessage's configuration, or by
// CreateTaskPushNotificationConfig) gets 1.0's StreamResponse, {"task": …} in
// 1.0's JSON, as the official 1.0 SDKs' servers post it and their webhooks parse
// it; one set in 0.3 gets 0.3's task, as before. The version outlives a restart:
// a task waiting for approval, approved after it, posts its end to each config in
// its own version. (Every notification was 0.3's task: a 1.0 webhook, parsing a
// StreamResponse, refused each one, and the client was never told.)
func TestA2APushSpeaksTheVersionOfItsConfig(t *testing.T) {
	var sent atomic.Int64
	cfg := mailer(t, &sent)
	cfg.A2A = &node.A2AConfig{PushAllow: []string{"127.0.0.1"}}
	cfg.DataDir = t.TempDir()
	hook, hookURL := newBodyHook(t)

	url, stop := a2aNodeToStop(t, cfg)
	out := postJSONRPC(t, url+"/a2a/mailer", "SendMessage", map[string]any{
		"message":       map[string]any{"messageId": "m-push-v1", "role": "ROLE_USER", "parts": []any{map[string]any{"text": "mail bob"}}},
		"configuration": map[string]any{"taskPushNotificationConfig": map[string]any{"id": "inline", "url": hookURL + "/inline", "token": "tok"}},
	})
	task, _ := out["result"].(map[string]any)["task"].(map[string]any)
	id, _ := task["id"].(string)
	contextID, _ := task["contextId"].(string)
	if st, _ := task["status"].(map[string]any); id == "" || st["state"] != "TASK_STATE_INPUT_REQUIRED" {
		t.Fatalf("SendMessage: %v", out)
	}
	postJSONRPC(t, url+"/a2a/mailer", "CreateTaskPushNotificationConfig", map[string]any{"taskId": id, "id": "created", "url": hookURL + "/created"})
	postJSONRPC(t, url+"/a2a/mailer", "tasks/pushNotificationConfig/set", map[string]any{"taskId": id, "pushNotificationConfig": map[string]any{"id": "legacy", "url": hookURL + "/legacy"}})
	stop()

	second := nodetest.Start(t, cfg)
	api := httptest.NewServer(second.Handler())
	defer api.Close()
	client, _ := a2aClient(t, api.URL, "/a2a/mailer"+a2a.CardPath)
	answer := userMessage("approve")
	answer.TaskID, answer.ContextID = sdk.TaskID(id), contextID
	res, err := client.SendMessage(context.Background(), &sdk.MessageSendParams{Message: answer})
	if err != nil {
		t.Fatal(err)
	}
	if end := res.(*sdk.Task); end.Status.State != sdk.TaskStateCompleted {
		t.Fatalf("after the approval: %s", end.Status.State)
	}

	// The last body a path got, once it is the completed task's.
	ended := func(path string, state func([]byte) string, want string) [][]byte {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			bodies := hook.got(path)
			if len(bodies) > 0 && state(bodies[len(bodies)-1]) == want {
				return bodies
			}
			if time.Now().After(deadline) {
				var got []string
				for _, b := range bodies {
					got = append(got, truncated(state(b), 120))
				}
				t.Fatalf("%s did not get the completed task within 20 s; it got %q", path, got)
			}
		}
	}
	v1State := func(b []byte) string {
		var r v1StreamResponse
		d := json.NewDecoder(bytes.NewReader(b))
		d.DisallowUnknownFields()
		if err := d.Decode(&r); err != nil || r.Task == nil {
			return "not a StreamResponse: " + strings.TrimSpace(string(b))
		}
		return r.Task.Status.State
	}
	for _, path := range []string{"/inline", "/created"} {
		for _, b := range ended(path, v1State, "TASK_STATE_COMPLETED") {
			if s := v1State(b); !strings.HasPrefix(s, "TASK_STATE_") {
				t.Fatalf("%s got %s", path, s)
			}
			var r v1StreamResponse
			_ = json.Unmarshal(b, &r)
			if r.Task.ID != id || r.Task.ContextID != contextID {
				t.Fatalf("%s got task %s of %s, want %s of %s", path, r.Task.ID, r.Task.ContextID, id, contextID)
			}
		}
	}
	legacyState := func(b []byte) string {
		var task sdk.Task
		if err := json.Unmarshal(b, &task); err != nil || !bytes.Contains(b, []byte(`"kind":"task"`)) {
			return "not a 0.3 task: " + string(b)
		}
		return string(task.Status.State)
	}
	ended("/legacy", legacyState, string(sdk.TaskStateCompleted))
	if sent.Load() != 1 {
		t.Fatalf("%d emails sent, want 1", sent.Load())
	}
}
