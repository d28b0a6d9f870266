package node_test

import (
	"context"
	"encoding/json"
	"errors"
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
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// pushHook is a webhook that records the states it is posted, by path.
type pushHook struct {
	mu     sync.Mutex
	states map[string][]sdk.TaskState
	tokens map[string][]string
}

func newPushHook(t *testing.T) (*pushHook, string) {
	h := &pushHook{states: map[string][]sdk.TaskState{}, tokens: map[string][]string{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var task sdk.Task
		if err := json.Unmarshal(b, &task); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		h.states[r.URL.Path] = append(h.states[r.URL.Path], task.Status.State)
		h.tokens[r.URL.Path] = append(h.tokens[r.URL.Path], r.Header.Get("X-A2A-Notification-Token")+"|"+r.Header.Get("Authorization"))
	}))
	t.Cleanup(srv.Close)
	return h, srv.URL
}

func (h *pushHook) got(path string) ([]sdk.TaskState, []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]sdk.TaskState(nil), h.states[path]...), append([]string(nil), h.tokens[path]...)
}

// Push-notification configs outlive the node: after a restart over the same data,
// tasks/pushNotificationConfig/get and list answer them, and a task waiting for
// approval, approved after the restart, posts its end to the webhook. Their secrets
// are never in the log: a config that had a token or credentials comes back without
// them, and gets no notification (set it again). A config is set for a task the
// node has only.
func TestA2APushConfigsSurviveARestart(t *testing.T) {
	var sent atomic.Int64
	cfg := mailer(t, &sent)
	cfg.A2A = &node.A2AConfig{PushAllow: []string{"127.0.0.1"}}
	cfg.DataDir = t.TempDir()
	hook, hookURL := newPushHook(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	url, stop := a2aNodeToStop(t, cfg)
	client, _ := a2aClient(t, url, "/a2a/mailer"+a2a.CardPath)
	res, err := client.SendMessage(ctx, &sdk.MessageSendParams{Message: userMessage("mail bob"),
		Config: &sdk.MessageSendConfig{PushConfig: &sdk.PushConfig{ID: "plain", URL: hookURL + "/plain"}}})
	if err != nil {
		t.Fatal(err)
	}
	waiting := res.(*sdk.Task)
	if waiting.Status.State != sdk.TaskStateInputRequired {
		t.Fatalf("before the restart: %s", waiting.Status.State)
	}
	authed := sdk.PushConfig{ID: "authed", URL: hookURL + "/authed", Token: "secret-token",
		Auth: &sdk.PushAuthInfo{Schemes: []string{"Bearer"}, Credentials: "secret-credentials"}}
	if _, err := client.SetTaskPushConfig(ctx, &sdk.TaskPushConfig{TaskID: waiting.ID, Config: authed}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.SetTaskPushConfig(ctx, &sdk.TaskPushConfig{TaskID: sdk.TaskID(waiting.ContextID + "~0123456789abcdef0123456789abcdef"),
		Config: sdk.PushConfig{URL: hookURL + "/nowhere"}}); !errors.Is(err, sdk.ErrTaskNotFound) {
		t.Fatalf("a config for a task the node does not have: %v", err)
	}
	if got, err := client.GetTaskPushConfig(ctx, &sdk.GetTaskPushConfigParams{TaskID: waiting.ID, ConfigID: "authed"}); err != nil ||
		got.Config.Token != "secret-token" || got.Config.Auth == nil || got.Config.Auth.Credentials != "secret-credentials" {
		t.Fatalf("the config with secrets before the restart: %+v, %v", got, err)
	}
	stop()

	second := nodetest.Start(t, cfg)
	stream, err := second.Log().Read(ctx, a2a.PushStreamFor(waiting.ID), 1)
	if err != nil || len(stream) != 2 {
		t.Fatalf("the push configs' stream: %d events, %v", len(stream), err)
	}
	for _, e := range stream {
		if strings.Contains(string(e.Payload), "secret") {
			t.Fatalf("a secret in the log: %s", e.Payload)
		}
	}
	if eventlog.IsSession(a2a.PushStreamFor(waiting.ID)) {
		t.Fatal("the push configs' stream counts as a session")
	}
	api := httptest.NewServer(second.Handler())
	defer api.Close()
	client, _ = a2aClient(t, api.URL, "/a2a/mailer"+a2a.CardPath)
	resp, err := http.Get(api.URL + "/v1/sessions")
	if err != nil {
		t.Fatal(err)
	}
	var infos []eventlog.SessionInfo
	err = json.NewDecoder(resp.Body).Decode(&infos)
	resp.Body.Close()
	marked := false
	for _, s := range infos {
		if s.ID == a2a.PushStreamFor(waiting.ID) {
			marked = s.Status == a2a.PushStatus
		}
	}
	if err != nil || !marked {
		t.Fatalf("GET /v1/sessions does not mark the push configs' stream %s: %+v, %v", a2a.PushStatus, infos, err)
	}
	list, err := client.ListTaskPushConfig(ctx, &sdk.ListTaskPushConfigParams{TaskID: waiting.ID})
	if err != nil || len(list) != 2 || list[0].Config.ID != "authed" || list[1].Config.ID != "plain" || list[1].Config.URL != hookURL+"/plain" {
		t.Fatalf("pushNotificationConfig/list after the restart: %+v, %v", list, err)
	}
	if a := list[0].Config; a.Token != "" || a.Auth == nil || a.Auth.Credentials != "" || len(a.Auth.Schemes) != 1 {
		t.Fatalf("the config with secrets after the restart: %+v", a)
	}
	if got, err := client.GetTaskPushConfig(ctx, &sdk.GetTaskPushConfigParams{TaskID: waiting.ID, ConfigID: "plain"}); err != nil || got.Config.URL != hookURL+"/plain" {
		t.Fatalf("pushNotificationConfig/get after the restart: %+v, %v", got, err)
	}

	answer := userMessage("approve")
	answer.TaskID, answer.ContextID = waiting.ID, waiting.ContextID
	res, err = client.SendMessage(ctx, &sdk.MessageSendParams{Message: answer})
	if err != nil {
		t.Fatal(err)
	}
	if end := res.(*sdk.Task); end.Status.State != sdk.TaskStateCompleted {
		t.Fatalf("after the approval: %s", end.Status.State)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		states, _ := hook.got("/plain")
		if len(states) > 0 && states[len(states)-1] == sdk.TaskStateCompleted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the webhook did not get the completed task within 20 s; it got %v", states)
		}
	}
	if states, _ := hook.got("/authed"); len(states) != 0 {
		t.Fatalf("the config whose secrets were not kept was posted %v", states)
	}

	// A config deleted after the restart stays deleted.
	if err := client.DeleteTaskPushConfig(ctx, &sdk.DeleteTaskPushConfigParams{TaskID: waiting.ID, ConfigID: "authed"}); err != nil {
		t.Fatal(err)
	}
	if list, err := client.ListTaskPushConfig(ctx, &sdk.ListTaskPushConfigParams{TaskID: waiting.ID}); err != nil || len(list) != 1 {
		t.Fatalf("pushNotificationConfig/list after the delete: %+v, %v", list, err)
	}
}
