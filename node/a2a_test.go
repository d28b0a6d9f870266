package node_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	"github.com/a2aproject/a2a-go/a2aclient/agentcard"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// a2aNode starts a node serving A2A over HTTP and returns its base URL.
func a2aNode(t *testing.T, cfg node.Config) (*node.Node, string) {
	t.Helper()
	if cfg.A2A == nil {
		cfg.A2A = &node.A2AConfig{}
	}
	if testing.Verbose() {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	n := nodetest.Start(t, cfg)
	srv := httptest.NewServer(n.Handler())
	t.Cleanup(srv.Close)
	return n, srv.URL
}

// a2aClient resolves the card at base+path and returns a client of it.
func a2aClient(t *testing.T, base, cardPath string) (*a2aclient.Client, *sdk.AgentCard) {
	t.Helper()
	card, err := agentcard.DefaultResolver.Resolve(context.Background(), base, agentcard.WithPath(cardPath))
	if err != nil {
		t.Fatal(err)
	}
	c, err := a2aclient.NewFromCard(context.Background(), card)
	if err != nil {
		t.Fatal(err)
	}
	return c, card
}

func a2aScript(t *testing.T, steps ...llm.ScriptStep) llm.Model {
	t.Helper()
	m, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: steps})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func userMessage(text string) *sdk.Message {
	return sdk.NewMessage(sdk.MessageRoleUser, sdk.TextPart{Text: text})
}

func artifactText(t *testing.T, task *sdk.Task) string {
	t.Helper()
	var out []string
	for _, a := range task.Artifacts {
		for _, p := range a.Parts {
			if tp, ok := p.(sdk.TextPart); ok {
				out = append(out, tp.Text)
			}
		}
	}
	return strings.Join(out, "\n")
}

func TestA2ACardAndSendMessage(t *testing.T) {
	n, base := a2aNode(t, node.Config{Model: a2aScript(t, llm.ScriptStep{Content: "hello back"}),
		Agents: []node.NamedAgent{{Name: "helper", Description: "helps", Tools: []string{}}}})
	client, card := a2aClient(t, base, a2a.CardPath)
	if card.URL != base+"/a2a" || card.ProtocolVersion != a2a.ProtocolVersion || !card.Capabilities.Streaming {
		t.Fatalf("card: url %q, version %q, caps %+v", card.URL, card.ProtocolVersion, card.Capabilities)
	}
	if len(card.Skills) != 2 || card.Skills[0].ID != "default" || card.Skills[1].ID != "helper" || !strings.Contains(card.Skills[1].Description, "helps") {
		t.Fatalf("skills: %+v", card.Skills)
	}
	_, helperCard := a2aClient(t, base, "/a2a/helper"+a2a.CardPath)
	if helperCard.URL != base+"/a2a/helper" {
		t.Fatalf("helper card url %q", helperCard.URL)
	}
	res, err := client.SendMessage(context.Background(), &sdk.MessageSendParams{Message: userMessage("hi")})
	if err != nil {
		t.Fatal(err)
	}
	task, ok := res.(*sdk.Task)
	if !ok {
		t.Fatalf("result %T, want a task", res)
	}
	if task.Status.State != sdk.TaskStateCompleted || artifactText(t, task) != "hello back" {
		t.Fatalf("task %s: %s, artifacts %q", task.ID, task.Status.State, artifactText(t, task))
	}
	got, err := client.GetTask(context.Background(), &sdk.TaskQueryParams{ID: task.ID})
	if err != nil || got.Status.State != sdk.TaskStateCompleted || got.ContextID != task.ContextID {
		t.Fatalf("tasks/get: %+v, %v", got, err)
	}
	// The context is the Troupe session.
	events, err := n.Log().Read(context.Background(), task.ContextID, 1)
	if err != nil || len(events) == 0 || events[len(events)-1].Type != messages.TypeTaskCompleted {
		t.Fatalf("session %s: %d events, %v", task.ContextID, len(events), err)
	}
}

func TestA2AStreamReportsStatusesThenArtifact(t *testing.T) {
	_, base := a2aNode(t, node.Config{Model: a2aScript(t,
		llm.ScriptStep{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "calculator", Arguments: `{"expression":"6*7"}`}}},
		llm.ScriptStep{Content: "42"}), Tools: []tools.Tool{tools.Calculator{}}})
	client, _ := a2aClient(t, base, a2a.CardPath)
	var seen []string
	var last sdk.Event
	for ev, err := range client.SendStreamingMessage(context.Background(), &sdk.MessageSendParams{Message: userMessage("what is 6*7?")}) {
		if err != nil {
			t.Fatal(err)
		}
		last = ev
		switch v := ev.(type) {
		case *sdk.Task:
			seen = append(seen, "task:"+string(v.Status.State))
		case *sdk.TaskStatusUpdateEvent:
			s := "status:" + string(v.Status.State)
			if v.Status.Message != nil {
				s += ":" + partsOf(v.Status.Message)
			}
			seen = append(seen, s)
		case *sdk.TaskArtifactUpdateEvent:
			seen = append(seen, "artifact:"+partsOf(&sdk.Message{Parts: v.Artifact.Parts}))
		}
	}
	want := []string{"task:submitted", "status:working", "status:working:calling tool calculator", "artifact:42", "status:completed:42"}
	if strings.Join(seen, " | ") != strings.Join(want, " | ") {
		t.Fatalf("stream:\n got %q\nwant %q", seen, want)
	}
	if st, ok := last.(*sdk.TaskStatusUpdateEvent); !ok || !st.Final {
		t.Fatalf("last event %T is not the final status", last)
	}
}

func partsOf(m *sdk.Message) string {
	var out []string
	for _, p := range m.Parts {
		if tp, ok := p.(sdk.TextPart); ok {
			out = append(out, tp.Text)
		}
	}
	return strings.Join(out, "")
}

func TestA2ACancelRunningTask(t *testing.T) {
	block := newBlockingTool()
	_, base := a2aNode(t, node.Config{Model: blockScript(t), Tools: []tools.Tool{block}})
	client, _ := a2aClient(t, base, a2a.CardPath)
	blocking := false
	res, err := client.SendMessage(context.Background(), &sdk.MessageSendParams{Message: userMessage("block"),
		Config: &sdk.MessageSendConfig{Blocking: &blocking}})
	if err != nil {
		t.Fatal(err)
	}
	task := res.(*sdk.Task)
	select {
	case <-block.started:
	case <-time.After(20 * time.Second):
		t.Fatal("the tool never started")
	}
	waitFor(t, 10*time.Second, "the task working", func() bool {
		got, err := client.GetTask(context.Background(), &sdk.TaskQueryParams{ID: task.ID})
		return err == nil && got.Status.State == sdk.TaskStateWorking
	})
	// tasks/resubscribe follows the running task to its end: it follows the task's
	// session from before its first event (the task, working), so the cancel that
	// comes after that event reaches it.
	feed := a2aFeed(client.ResubscribeToTask(context.Background(), &sdk.TaskIDParams{ID: task.ID}))
	if it, ok := nextItem(t, feed, 20*time.Second); !ok || it.err != nil {
		t.Fatalf("tasks/resubscribe: %v", it.err)
	} else if first, isTask := it.ev.(*sdk.Task); !isTask || first.Status.State != sdk.TaskStateWorking {
		t.Fatalf("tasks/resubscribe's first event: %#v, want the task working", it.ev)
	}
	resubscribed := make(chan sdk.TaskState, 1)
	go func() {
		var last sdk.TaskState
		for it := range feed {
			if st, ok := it.ev.(*sdk.TaskStatusUpdateEvent); ok && it.err == nil {
				last = st.Status.State
			}
		}
		resubscribed <- last
	}()
	canceled, err := client.CancelTask(context.Background(), &sdk.TaskIDParams{ID: task.ID})
	if err != nil {
		t.Fatal(err)
	}
	if canceled.Status.State != sdk.TaskStateCanceled {
		t.Fatalf("after tasks/cancel: %s", canceled.Status.State)
	}
	waitCancelled(t, block, 20*time.Second)
	select {
	case st := <-resubscribed:
		if st != sdk.TaskStateCanceled {
			t.Fatalf("tasks/resubscribe ended with %q, want canceled", st)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("tasks/resubscribe did not end")
	}
	got, err := client.GetTask(context.Background(), &sdk.TaskQueryParams{ID: task.ID})
	if err != nil || got.Status.State != sdk.TaskStateCanceled {
		t.Fatalf("tasks/get after cancel: %+v, %v", got, err)
	}
}

func TestA2AInputRequiredWhileApprovalPending(t *testing.T) {
	var sent atomic.Int64
	_, base := a2aNode(t, mailer(t, &sent))
	client, _ := a2aClient(t, base, "/a2a/mailer"+a2a.CardPath)
	res, err := client.SendMessage(context.Background(), &sdk.MessageSendParams{Message: userMessage("mail bob")})
	if err != nil {
		t.Fatal(err)
	}
	task := res.(*sdk.Task)
	if task.Status.State != sdk.TaskStateInputRequired || !strings.Contains(partsOf(task.Status.Message), "send_email") {
		t.Fatalf("task %s: %s %v", task.ID, task.Status.State, task.Status.Message)
	}
	if sent.Load() != 0 {
		t.Fatal("the email was sent before approval")
	}
	answer := userMessage("approve looks fine")
	answer.TaskID, answer.ContextID = task.ID, task.ContextID
	res, err = client.SendMessage(context.Background(), &sdk.MessageSendParams{Message: answer})
	if err != nil {
		t.Fatal(err)
	}
	done := res.(*sdk.Task)
	if done.ID != task.ID || done.Status.State != sdk.TaskStateCompleted || artifactText(t, done) != "handled" {
		t.Fatalf("after approval: %s %s %q", done.ID, done.Status.State, artifactText(t, done))
	}
	if sent.Load() != 1 {
		t.Fatalf("sent %d emails, want 1", sent.Load())
	}
}

func TestA2ARetriedMessageStartsOneTask(t *testing.T) {
	n, base := a2aNode(t, node.Config{Model: a2aScript(t, llm.ScriptStep{Content: "once"}, llm.ScriptStep{Content: "twice"})})
	client, _ := a2aClient(t, base, a2a.CardPath)
	msg := userMessage("hi")
	first, err := client.SendMessage(context.Background(), &sdk.MessageSendParams{Message: msg})
	if err != nil {
		t.Fatal(err)
	}
	again := userMessage("hi")
	again.ID = msg.ID
	second, err := client.SendMessage(context.Background(), &sdk.MessageSendParams{Message: again})
	if err != nil {
		t.Fatal(err)
	}
	t1, t2 := first.(*sdk.Task), second.(*sdk.Task)
	if t1.ID != t2.ID || artifactText(t, t2) != "once" {
		t.Fatalf("retry: task %s then %s (%q)", t1.ID, t2.ID, artifactText(t, t2))
	}
	events, _ := n.Log().Read(context.Background(), t1.ContextID, 1)
	submitted := 0
	for _, e := range events {
		if e.Type == messages.TypeTaskSubmitted {
			submitted++
		}
	}
	if submitted != 1 {
		t.Fatalf("session %s has %d tasks, want 1", t1.ContextID, submitted)
	}
}

func TestA2AHostileRequests(t *testing.T) {
	_, base := a2aNode(t, node.Config{Model: a2aScript(t, llm.ScriptStep{Content: "x"})})
	post := func(body string) (int, map[string]any) {
		t.Helper()
		resp, err := http.Post(base+"/a2a", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var out map[string]any
		_ = json.Unmarshal(b, &out)
		return resp.StatusCode, out
	}
	postVersion := func(v string) map[string]any {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, base+"/a2a", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"nope"}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(a2a.VersionHeader, v)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return out
	}
	code := func(out map[string]any) float64 {
		e, _ := out["error"].(map[string]any)
		c, _ := e["code"].(float64)
		return c
	}
	if _, out := post(`{"jsonrpc":"2.0","id":1,"method":`); code(out) != -32700 {
		t.Fatalf("malformed JSON: %v", out)
	}
	if _, out := post(`{"jsonrpc":"1.0","id":1,"method":"tasks/get"}`); code(out) != -32600 {
		t.Fatalf("wrong version: %v", out)
	}
	if _, out := post(`[1,2]`); code(out) != -32600 {
		t.Fatalf("batch: %v", out)
	}
	// A body that is not UTF-8 is a parse error, not a message run on U+FFFD in place
	// of its bad bytes.
	if _, out := post("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"message/send\",\"params\":{\"message\":{\"kind\":\"message\",\"messageId\":\"bad-utf8\",\"role\":\"user\",\"parts\":[{\"kind\":\"text\",\"text\":\"hi \xff\"}]}}}"); code(out) != -32700 || out["result"] != nil ||
		!strings.Contains(out["error"].(map[string]any)["message"].(string), "UTF-8") {
		t.Fatalf("a body that is not UTF-8: %v, want -32700 saying so", out)
	}
	// An id is a string, a number or null: another is refused, not echoed back, and
	// its message starts no task.
	for _, id := range []string{`{"a":1}`, `[1]`, `true`} {
		body := `{"jsonrpc":"2.0","id":` + id + `,"method":"message/send","params":{"message":{"kind":"message","messageId":"bad-id","role":"user","parts":[{"kind":"text","text":"hi"}]}}}`
		if _, out := post(body); code(out) != -32600 || out["id"] != nil || out["result"] != nil {
			t.Fatalf("id %s: %v, want -32600 with a null id", id, out)
		}
	}
	if _, out := post(`{"jsonrpc":"2.0","id":"x-1","method":"tasks/get","params":{"id":"nope"}}`); code(out) != -32001 || out["id"] != "x-1" {
		t.Fatalf("a string id: %v", out)
	}
	if _, out := post(`{"jsonrpc":"2.0","id":1,"method":"tasks/explode","params":{}}`); code(out) != -32601 {
		t.Fatalf("unknown method: %v", out)
	}
	// Params of the wrong shape are invalid params, not a parse error: the request parsed.
	for _, body := range []string{`{"jsonrpc":"2.0","id":1,"method":"message/send","params":"x"}`,
		`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":7}}`, `{"jsonrpc":"2.0","id":1,"method":"tasks/cancel"}`} {
		if _, out := post(body); code(out) != -32602 {
			t.Fatalf("%s: %v, want -32602", body, out)
		}
	}
	if _, out := post(`{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{}}`); code(out) != -32602 || !strings.Contains(out["error"].(map[string]any)["message"].(string), "message") {
		t.Fatalf("A2A 1.0 method without a message: %v", out)
	}
	if _, out := post(`{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"kind":"text","value":"hi"}]}}}`); code(out) != -32602 {
		t.Fatalf("A2A 1.0 part without content: %v", out)
	}
	// A 1.0 request's params of the wrong shape are invalid params too, not a parse error.
	for _, body := range []string{`{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":5}]}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":7}}`} {
		if _, out := post(body); code(out) != -32602 {
			t.Fatalf("%s: %v, want -32602", body, out)
		}
	}
	if out := postVersion("2.0"); code(out) != -32009 {
		t.Fatalf("A2A-Version 2.0: %v", out)
	}
	for _, v := range []string{"", "0.3", "1.0", "1.0.1"} {
		if out := postVersion(v); code(out) != -32001 {
			t.Fatalf("A2A-Version %q: %v, want the unknown task's error", v, out)
		}
	}
	// A 1.0 method not served is refused as 1.0 answers: no 0.3 "data": {"error": ...},
	// which a 1.0 client reads as a list of details.
	for _, m := range []string{"ListTasks", "GetExtendedAgentCard"} {
		if _, out := post(`{"jsonrpc":"2.0","id":1,"method":"` + m + `","params":{}}`); code(out) != -32601 || out["error"].(map[string]any)["data"] != nil {
			t.Fatalf("A2A 1.0 method %s not served: %v, want -32601 with no data", m, out)
		}
	}
	if _, out := post(`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"nope"}}`); out["error"] == nil {
		t.Fatalf("unknown task: %v", out)
	}
	huge := `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"kind":"message","messageId":"m","role":"user","parts":[{"kind":"text","text":"` +
		strings.Repeat("a", 3<<20) + `"}]}}}`
	if status, _ := post(huge); status != http.StatusRequestEntityTooLarge {
		t.Fatalf("huge message: status %d", status)
	}
}

func TestA2AToolCallsAnotherNodesAgent(t *testing.T) {
	b, remote := a2aNode(t, node.Config{Model: a2aScript(t, llm.ScriptStep{Content: "greetings from B"}, llm.ScriptStep{Content: "a second task"})})
	tool, err := a2a.NewTool(a2a.ToolConfig{Name: "b", CardURL: remote + a2a.CardPath})
	if err != nil {
		t.Fatal(err)
	}
	if src := tools.SourceOf(tool); src != "a2a:b" {
		t.Errorf("the remote agent's tool has source %q, want a2a:b", src)
	}
	n := nodetest.Start(t, node.Config{Tools: []tools.Tool{tool}, Model: a2aScript(t,
		llm.ScriptStep{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "a2a__b", Arguments: `{"message":"hello B"}`}}},
		llm.ScriptStep{Content: "B said hello"})})
	events := nodetest.Run(t, n, "caller", "ask B")
	var out string
	for _, e := range events {
		if e.Type == messages.TypeToolCallCompleted {
			p, _ := e.Decode()
			b, _ := json.Marshal(p)
			out = string(b)
		}
	}
	if !strings.Contains(out, "greetings from B") || !strings.Contains(out, "context_id: a2a-") {
		t.Fatalf("tool result: %s", out)
	}
	if last := events[len(events)-1]; last.Type != messages.TypeTaskCompleted {
		t.Fatalf("caller ended with %s", last.Type)
	}
	// The call performed again with its key (a crash between the call and its
	// record) is the same A2A message: B runs it once.
	var key string
	for _, e := range events {
		if e.Type == messages.TypeToolCallRequested {
			p, _ := e.Decode()
			key = p.(*messages.ToolCallRequested).Key
		}
	}
	again, err := tool.Call(context.Background(), tools.Call{Key: key, Arguments: `{"message":"hello B"}`})
	if err != nil || !strings.Contains(again, "greetings from B") {
		t.Fatalf("the call again: %q, %v", again, err)
	}
	_, ctxID, _ := strings.Cut(again, "context_id: ")
	ctxID = strings.TrimSuffix(ctxID, ")")
	remoteEvents, _ := b.Log().Read(context.Background(), ctxID, 1)
	submitted := 0
	for _, e := range remoteEvents {
		if e.Type == messages.TypeTaskSubmitted {
			submitted++
		}
	}
	if submitted != 1 {
		t.Fatalf("B's session %s has %d tasks, want 1", ctxID, submitted)
	}
}

func TestA2APushNotificationsReachTheWebhook(t *testing.T) {
	states := make(chan sdk.TaskState, 16)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var task sdk.Task
		if err := json.NewDecoder(r.Body).Decode(&task); err == nil && r.Header.Get("X-A2A-Notification-Token") == "secret-token" {
			states <- task.Status.State
		}
	}))
	defer hook.Close()
	_, base := a2aNode(t, node.Config{Model: a2aScript(t, llm.ScriptStep{Content: "pushed"}),
		A2A: &node.A2AConfig{PushAllow: []string{"127.0.0.1"}}})
	client, _ := a2aClient(t, base, a2a.CardPath)
	res, err := client.SendMessage(context.Background(), &sdk.MessageSendParams{Message: userMessage("hi"),
		Config: &sdk.MessageSendConfig{PushConfig: &sdk.PushConfig{URL: hook.URL + "/hook", Token: "secret-token"}}})
	if err != nil {
		t.Fatal(err)
	}
	task := res.(*sdk.Task)
	list, err := client.ListTaskPushConfig(context.Background(), &sdk.ListTaskPushConfigParams{TaskID: task.ID})
	if err != nil || len(list) != 1 || list[0].Config.URL != hook.URL+"/hook" {
		t.Fatalf("pushNotificationConfig/list: %+v, %v", list, err)
	}
	// A second config, deleted: the delete answers a JSON-RPC response.
	extra, err := client.SetTaskPushConfig(context.Background(), &sdk.TaskPushConfig{TaskID: task.ID, Config: sdk.PushConfig{ID: "extra", URL: hook.URL + "/extra"}})
	if err != nil {
		t.Fatalf("pushNotificationConfig/set: %v", err)
	}
	if err := client.DeleteTaskPushConfig(context.Background(), &sdk.DeleteTaskPushConfigParams{TaskID: task.ID, ConfigID: extra.Config.ID}); err != nil {
		t.Fatalf("pushNotificationConfig/delete: %v", err)
	}
	if list, err := client.ListTaskPushConfig(context.Background(), &sdk.ListTaskPushConfigParams{TaskID: task.ID}); err != nil || len(list) != 1 {
		t.Fatalf("pushNotificationConfig/list after the delete: %d, %v", len(list), err)
	}
	deadline := time.After(20 * time.Second)
	for {
		select {
		case st := <-states:
			if st == sdk.TaskStateCompleted {
				return
			}
		case <-deadline:
			t.Fatal("the webhook never got the completed task")
		}
	}
}

func TestA2AConfigIsValidated(t *testing.T) {
	for _, c := range []node.A2AConfig{{PublicURL: "ftp://x"}, {PublicURL: "not a url"}, {PushAllow: []string{"bad/prefix/"}}} {
		if err := (node.Config{Model: llm.Offline{}, A2A: &c}).Validate(); err == nil || !strings.Contains(err.Error(), "a2a.") {
			t.Errorf("%+v: %v", c, err)
		}
	}
}

func TestA2ACardTakesThePublicURL(t *testing.T) {
	_, base := a2aNode(t, node.Config{Model: llm.Offline{}, A2A: &node.A2AConfig{PublicURL: "https://agents.example.com/"}})
	resp, err := http.Get(base + a2a.CardPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var card sdk.AgentCard
	if err := json.NewDecoder(resp.Body).Decode(&card); err != nil || card.URL != "https://agents.example.com/a2a" {
		t.Fatalf("card url %q, %v", card.URL, err)
	}
}

// A node whose API needs a token says so in its cards (a bearer scheme, required),
// so that an A2A client knows to send one; without tokens, the cards name none.
func TestA2ACardDeclaresTheBearerToken(t *testing.T) {
	card := func(cfg node.Config) sdk.AgentCard {
		t.Helper()
		_, base := a2aNode(t, cfg)
		resp, err := http.Get(base + a2a.CardPath)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var c sdk.AgentCard
		if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&c) != nil {
			t.Fatalf("card: %s", resp.Status)
		}
		return c
	}
	c := card(node.Config{Model: llm.Offline{}, HTTP: node.HTTPConfig{Auth: node.AuthConfig{Tokens: []string{"a-long-enough-secret-token-1234"}}}})
	s, ok := c.SecuritySchemes["bearer"].(sdk.HTTPAuthSecurityScheme)
	if !ok || s.Scheme != "Bearer" || len(c.Security) != 1 {
		t.Fatalf("with tokens, the card's security: %+v %+v", c.SecuritySchemes, c.Security)
	}
	if _, required := c.Security[0]["bearer"]; !required {
		t.Errorf("with tokens, the card does not require the bearer scheme: %+v", c.Security)
	}
	if c := card(node.Config{Model: llm.Offline{}}); len(c.SecuritySchemes) != 0 || len(c.Security) != 0 {
		t.Errorf("without tokens, the card names security: %+v %+v", c.SecuritySchemes, c.Security)
	}
}

func TestA2AAnswersOutliveTheWriteTimeout(t *testing.T) {
	cfg := node.Config{Model: slowModel{Model: a2aScript(t, llm.ScriptStep{Content: "slow"}, llm.ScriptStep{Content: "slow again"}), pause: 700 * time.Millisecond},
		A2A: &node.A2AConfig{}, HTTP: node.HTTPConfig{WriteTimeout: 300 * time.Millisecond}}
	n := nodetest.Start(t, cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := n.HTTPServer()
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	client, _ := a2aClient(t, "http://"+ln.Addr().String(), a2a.CardPath)
	res, err := client.SendMessage(context.Background(), &sdk.MessageSendParams{Message: userMessage("hi")})
	if err != nil {
		t.Fatal(err)
	}
	if task := res.(*sdk.Task); artifactText(t, task) != "slow" {
		t.Fatalf("blocking send: %s %q", task.Status.State, artifactText(t, task))
	}
	var last sdk.TaskState
	for ev, err := range client.SendStreamingMessage(context.Background(), &sdk.MessageSendParams{Message: userMessage("again")}) {
		if err != nil {
			t.Fatal(err)
		}
		if st, ok := ev.(*sdk.TaskStatusUpdateEvent); ok {
			last = st.Status.State
		}
	}
	if last != sdk.TaskStateCompleted {
		t.Fatalf("stream ended with %q", last)
	}
}

// What the A2A specification makes invalid in a message is refused with -32602
// naming the field, in 0.3 and 1.0, and nothing runs: an empty messageId, a role
// other than user or agent (0.3 let any through, where 1.0 refused it), a part
// with the content of two kinds (text and data), file bytes that are not base64.
// What it allows is accepted: base64 padded or not, in either alphabet, and a
// part's members that are no kind's content.
func TestA2AInvalidPartsAndMessageIDs(t *testing.T) {
	n, base := a2aNode(t, node.Config{Model: a2aScript(t, llm.ScriptStep{Content: "x"}, llm.ScriptStep{Content: "x"},
		llm.ScriptStep{Content: "x"}, llm.ScriptStep{Content: "x"})})
	// The answer to a message/stream is an event stream, of one event here: the error.
	post := func(body string) map[string]any {
		t.Helper()
		resp, err := http.Post(base+"/a2a", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			raw = []byte(strings.TrimSpace(strings.TrimPrefix(string(raw), "data: ")))
		}
		var out map[string]any
		_ = json.Unmarshal(raw, &out)
		return out
	}
	v03 := func(method, id, parts string) string {
		return `{"jsonrpc":"2.0","id":1,"method":"` + method + `","params":{"message":{"kind":"message","messageId":` + id + `,"role":"user","parts":[` + parts + `]}}}`
	}
	v1 := func(id, parts string) string {
		return `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":` + id + `,"role":"ROLE_USER","parts":[` + parts + `]}}}`
	}
	for _, c := range []struct{ body, field string }{
		{v03("message/send", `""`, `{"kind":"text","text":"hi"}`), "message.messageId"},
		{v03("message/stream", `""`, `{"kind":"text","text":"hi"}`), "message.messageId"},
		{`{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"kind":"message","role":"user","parts":[{"kind":"text","text":"hi"}]}}}`, "message.messageId"},
		{v03("message/send", `"m-both"`, `{"kind":"text","text":"hi","data":{"a":1}}`), `message.parts[0]" is a text part with "data"`},
		{v03("message/send", `"m-both2"`, `{"kind":"text","text":"hi"},{"kind":"data","data":{"a":1},"text":"x"}`), `message.parts[1]" is a data part with "text"`},
		{v03("message/send", `"m-b64"`, `{"kind":"text","text":"hi"},{"kind":"file","file":{"bytes":"not base64!","mimeType":"text/plain"}}`), "message.parts[1].file.bytes"},
		{v03("message/send", `"m-nokind"`, `{"kind":"text","text":"hi"},{"text":"no kind"}`), `"message.parts[1]" has no "kind": want "text", "file" or "data"`},
		{v03("message/stream", `"m-nullkind"`, `{"kind":"text","text":"hi"},{"kind":null,"text":"x"}`), `"message.parts[1].kind" is null: want "text", "file" or "data"`},
		{v03("message/send", `"m-video"`, `{"kind":"text","text":"hi"},{"kind":"video","url":"x"}`), `"message.parts[1].kind" is "video": want "text", "file" or "data"`},
		{v03("message/send", `"m-numkind"`, `{"kind":5,"text":"hi"}`), `"message.parts[0].kind" is 5: want`},
		{v03("message/send", `"m-strpart"`, `{"kind":"text","text":"hi"},"just text"`), `"message.parts[1]" is not an object`},
		{`{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"kind":"message","messageId":"m-root","role":"root","parts":[{"kind":"text","text":"hi"}]}}}`, `"message.role" "root"`},
		{`{"jsonrpc":"2.0","id":1,"method":"message/stream","params":{"message":{"kind":"message","messageId":"m-norole","parts":[{"kind":"text","text":"hi"}]}}}`, `"message.role" ""`},
		{v1(`""`, `{"text":"hi"}`), "message.messageId"},
		{v03("message/send", `"`+strings.Repeat("m", 201)+`"`, `{"kind":"text","text":"hi"}`), `"message.messageId" is 201 bytes long: at most 200`},
		{v1(`"`+strings.Repeat("m", 500<<10)+`"`, `{"text":"hi"}`), `"message.messageId" is 512000 bytes long: at most 200`},
		{v1(`"m1-both"`, `{"text":"hi","data":{"a":1}}`), `message.parts[0]: a part has one of "text", "raw", "url" or "data", not "text" and "data"`},
		{v1(`"m1-b64"`, `{"raw":"not base64!","mediaType":"text/plain"}`), `message.parts[0]: "raw" is not valid base64`},
	} {
		out := post(c.body)
		e, _ := out["error"].(map[string]any)
		msg, _ := e["message"].(string)
		if e["code"] != float64(-32602) || !strings.Contains(msg, c.field) || out["result"] != nil {
			t.Errorf("%s: %v, want -32602 naming %s", c.body, out, c.field)
		}
	}
	// A file the agent cannot read is refused (-32005): it was taken and left out
	// of the task's input without a word.
	for _, c := range []struct{ body, why string }{
		{v03("message/send", `"m-bin"`, `{"kind":"text","text":"hi"},{"kind":"file","file":{"bytes":"_-8","mimeType":"application/octet-stream","name":"a.bin"}}`), `message.parts[1]: file "a.bin" is application/octet-stream: the agent reads text files only`},
		{v03("message/send", `"m-pdf"`, `{"kind":"text","text":"hi"},{"kind":"file","file":{"bytes":"JVBERi0=","mimeType":"application/pdf"}}`), `file "attachment" is application/pdf`},
		{v03("message/send", `"m-uri"`, `{"kind":"text","text":"hi"},{"kind":"file","file":{"uri":"file:///etc/passwd","mimeType":"text/plain"}}`), `a file by uri (file:///etc/passwd) is not fetched`},
		{v03("message/send", `"m-latin1"`, `{"kind":"text","text":"hi"},{"kind":"file","file":{"bytes":"6Q==","mimeType":"text/plain"}}`), `is not UTF-8 text`},
		{v1(`"m1-url"`, `{"text":"hi"},{"url":"https://example.com/a.txt","mediaType":"text/plain"}`), `is not fetched`},
		{v1(`"m1-bin"`, `{"text":"hi"},{"raw":"aGk","mediaType":"image/png"}`), `is image/png`},
	} {
		out := post(c.body)
		e, _ := out["error"].(map[string]any)
		msg, _ := e["message"].(string)
		if d, ok := e["data"].(map[string]any); ok { // 0.3: the reason is in data
			why, _ := d["error"].(string)
			msg += " " + why
		}
		if e["code"] != float64(-32005) || !strings.Contains(msg, c.why) || out["result"] != nil {
			t.Errorf("%s: %v, want -32005 saying %s", c.body, out, c.why)
		}
	}
	noSessions(t, n)
	for _, body := range []string{
		v03("message/send", `"m-ok-1"`, `{"kind":"text","text":"hi"},{"kind":"file","file":{"bytes":"aGk=","mimeType":"text/plain"}}`),
		v03("message/send", `"m-ok-2"`, `{"kind":"text","text":"hi","x-extension":{"a":1}},{"kind":"file","file":{"bytes":"aGk-","mimeType":"text/plain"}}`),
		v1(`"m1-ok-1"`, `{"text":"hi"},{"raw":"aGk","mediaType":"text/plain"}`),
		v1(`"m1-ok-2"`, `{"text":"hi"},{"data":{"a":1}}`),
	} {
		if out := post(body); out["error"] != nil || out["result"] == nil {
			t.Errorf("%s: %v, want it accepted", body, out)
		}
	}
	// A text file is part of the task's input.
	infos, err := n.Log().Sessions(context.Background(), eventlog.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, info := range infos {
		events, err := n.Log().Read(context.Background(), info.ID, 1)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range events {
			found = found || (e.Type == messages.TypeTaskSubmitted && strings.Contains(string(e.Payload), `hi\n[file attachment]\nhi`))
		}
	}
	if !found {
		t.Error("no task's input holds the text file sent with it")
	}
}
