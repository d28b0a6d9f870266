package node_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
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
// approval, approved after the restart, posts its end to the webhooks, with the
// token and credentials of the config that had them: those are in the log sealed
// with the node's secret key only (here the key file the embedded node made in its
// data directory), and no byte of the data directory holds them in plain text. A
// node with another key lists that config without them, fails its get saying
// why, and never puts them in a log line. A config is set for a task the node has
// only.
func TestA2APushConfigsSurviveARestart(t *testing.T) {
	var sent atomic.Int64
	cfg := mailer(t, &sent)
	cfg.A2A = &node.A2AConfig{PushAllow: []string{"127.0.0.1"}}
	cfg.DataDir = t.TempDir()
	var logs syncBuffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
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

	keyFile := filepath.Join(cfg.DataDir, node.SecretKeyFile)
	if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the data directory's key file: %v, %v", fi, err)
	}
	// No byte the node stored holds a secret in plain text: not the log's events,
	// not the database's files.
	err = filepath.WalkDir(cfg.DataDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte("secret-token")) || bytes.Contains(b, []byte("secret-credentials")) {
			t.Errorf("%s holds a secret in plain text", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// A node with another key: the config is there without its secrets, and its
	// get says why.
	other := cfg
	other.SecretKey = bytes.Repeat([]byte{7}, 32)
	wrong := nodetest.Start(t, other)
	api := httptest.NewServer(wrong.Handler())
	client, _ = a2aClient(t, api.URL, "/a2a/mailer"+a2a.CardPath)
	list, err := client.ListTaskPushConfig(ctx, &sdk.ListTaskPushConfigParams{TaskID: waiting.ID})
	if err != nil || len(list) != 2 || list[0].Config.ID != "authed" || list[0].Config.Token != "" || list[0].Config.Auth == nil || list[0].Config.Auth.Credentials != "" {
		t.Fatalf("pushNotificationConfig/list on a node with another key: %+v, %v", list, err)
	}
	_, err = client.GetTaskPushConfig(ctx, &sdk.GetTaskPushConfigParams{TaskID: waiting.ID, ConfigID: "authed"})
	if err == nil || !strings.Contains(err.Error(), "cannot be decrypted") || strings.Contains(err.Error(), "secret-token") || strings.Contains(err.Error(), "secret-credentials") {
		t.Fatalf("pushNotificationConfig/get on a node with another key: %v", err)
	}
	api.Close()
	if err := wrong.Close(); err != nil {
		t.Fatal(err)
	}
	if l := logs.String(); !strings.Contains(l, "cannot be decrypted") || strings.Contains(l, "secret-token") || strings.Contains(l, "secret-credentials") {
		t.Fatalf("the logs of the node with another key:\n%s", l)
	}

	second := nodetest.Start(t, cfg)
	stream, err := second.Log().Read(ctx, a2a.PushStreamFor(waiting.ID), 1)
	// The configs, and no lease of the task's notifications (A2APushFinal with
	// a holder): a node alone on the log it opened takes none
	// (a2a.ServerConfig.PushAlone).
	if i := slices.IndexFunc(stream, func(e messages.Envelope) bool {
		p, err := e.Decode()
		f, lease := p.(*messages.A2APushFinal)
		return err == nil && lease && f.Holder != ""
	}); i >= 0 {
		t.Fatalf("the push configs' stream holds a lease (seq %d): a node alone on its log takes none", stream[i].Seq)
	}
	if err != nil || len(stream) != 2 {
		t.Fatalf("the push configs' stream: %d events, %v", len(stream), err)
	}
	if eventlog.IsSession(a2a.PushStreamFor(waiting.ID)) {
		t.Fatal("the push configs' stream counts as a session")
	}
	api = httptest.NewServer(second.Handler())
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
	list, err = client.ListTaskPushConfig(ctx, &sdk.ListTaskPushConfigParams{TaskID: waiting.ID})
	if err != nil || len(list) != 2 || list[0].Config.ID != "authed" || list[1].Config.ID != "plain" || list[1].Config.URL != hookURL+"/plain" {
		t.Fatalf("pushNotificationConfig/list after the restart: %+v, %v", list, err)
	}
	if a := list[0].Config; a.Token != "secret-token" || a.Auth == nil || a.Auth.Credentials != "secret-credentials" || len(a.Auth.Schemes) != 1 {
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
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		states, tokens := hook.got("/authed")
		if len(states) > 0 && states[len(states)-1] == sdk.TaskStateCompleted {
			for _, tok := range tokens {
				if tok != "secret-token|Bearer secret-credentials" {
					t.Fatalf("the webhook of the config with secrets got %q", tok)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the webhook of the config with secrets did not get the completed task within 20 s; it got %v", states)
		}
	}

	// A config deleted after the restart stays deleted.
	if err := client.DeleteTaskPushConfig(ctx, &sdk.DeleteTaskPushConfigParams{TaskID: waiting.ID, ConfigID: "authed"}); err != nil {
		t.Fatal(err)
	}
	if list, err := client.ListTaskPushConfig(ctx, &sdk.ListTaskPushConfigParams{TaskID: waiting.ID}); err != nil || len(list) != 1 {
		t.Fatalf("pushNotificationConfig/list after the delete: %+v, %v", list, err)
	}
}

// A webhook no push would ever be sent to — not http(s), no host, or an address the
// push policy refuses (loopback, private, cloud metadata) that push_allow does not
// name — is refused when the config is set, with -32602 saying why, not accepted
// and then never posted to (the refusal only in the node's log). So is a message
// whose configuration names one: it starts no task.
func TestA2APushConfigRefusesAWebhookNoPushReaches(t *testing.T) {
	n, base := a2aNode(t, node.Config{A2A: &node.A2AConfig{PushAllow: []string{"10.1.2.3"}},
		Model: a2aScript(t, llm.ScriptStep{Content: "done"})})
	client, _ := a2aClient(t, base, a2a.CardPath)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := client.SendMessage(ctx, &sdk.MessageSendParams{Message: userMessage("hi")})
	if err != nil {
		t.Fatal(err)
	}
	task := res.(*sdk.Task)
	for _, c := range []struct{ url, why string }{
		{"file:///etc/passwd", "http or https"},
		{"ftp://hooks.example.com/a2a", "http or https"},
		{"http:///nohost", "http or https"},
		{"http://169.254.169.254/latest", "metadata"},
		{"http://127.0.0.1:9/hook", "loopback"},
		{"http://localhost:9/hook", "loopback"},
		{"https://[::1]/hook", "loopback"},
		{"http://192.168.1.10/hook", "private"},
	} {
		_, err := client.SetTaskPushConfig(ctx, &sdk.TaskPushConfig{TaskID: task.ID, Config: sdk.PushConfig{URL: c.url}})
		if !errors.Is(err, sdk.ErrInvalidParams) || !strings.Contains(err.Error(), c.why) {
			t.Errorf("a push config for %s: %v, want invalid params saying %q", c.url, err, c.why)
		}
	}
	for _, u := range []string{"http://10.1.2.3/hook", "https://hooks.example.com/a2a"} {
		if _, err := client.SetTaskPushConfig(ctx, &sdk.TaskPushConfig{TaskID: task.ID, Config: sdk.PushConfig{URL: u}}); err != nil {
			t.Errorf("a push config for %s: %v", u, err)
		}
	}
	sessions := func() int {
		list, err := n.Log().Sessions(ctx, eventlog.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		return len(list)
	}
	before := sessions()
	_, err = client.SendMessage(ctx, &sdk.MessageSendParams{Message: userMessage("hi again"),
		Config: &sdk.MessageSendConfig{PushConfig: &sdk.PushConfig{URL: "file:///etc/passwd"}}})
	if !errors.Is(err, sdk.ErrInvalidParams) {
		t.Errorf("a message whose push config is file:///etc/passwd: %v, want invalid params", err)
	}
	if after := sessions(); after != before {
		t.Errorf("the refused message made %d streams, want none", after-before)
	}
}
