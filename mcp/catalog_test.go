package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/tools/skills"
)

var pixel = []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x02\x00\x00\x00\x90wS\xde")

func resourceURIs(t *testing.T, cs *sdk.ClientSession) []string {
	t.Helper()
	var out []string
	for r, err := range cs.Resources(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r.URI)
	}
	slices.Sort(out)
	return out
}

func promptText(t *testing.T, res *sdk.GetPromptResult) string {
	t.Helper()
	var parts []string
	for _, m := range res.Messages {
		switch c := m.Content.(type) {
		case *sdk.TextContent:
			parts = append(parts, c.Text)
		case *sdk.EmbeddedResource:
			parts = append(parts, "resource "+c.Resource.URI+": "+c.Resource.Text)
		case *sdk.ImageContent:
			parts = append(parts, fmt.Sprintf("image %s of %d bytes", c.MIMEType, len(c.Data)))
		}
	}
	return strings.Join(parts, " | ")
}

// The resources, template and prompts of a ServedConfig (the configuration's
// "mcp_server"): read as text and as a blob, a template's variables in its text,
// prompts with their arguments, an embedded resource and an image, completion of
// an argument from its values, subscriptions to offered resources only.
func TestServerOffersResourcesAndPrompts(t *testing.T) {
	dir := t.TempDir()
	png := filepath.Join(dir, "p.png")
	if err := os.WriteFile(png, pixel, 0o600); err != nil {
		t.Fatal(err)
	}
	var served mcp.ServedConfig
	if err := json.Unmarshal([]byte(`{
		"resources": [
			{"uri": "notes://today", "name": "today", "text": "Buy milk."},
			{"uri": "notes://logo", "name": "logo", "mime_type": "image/png", "file": `+fmt.Sprintf("%q", png)+`}
		],
		"resource_templates": [{"uri_template": "notes://day/{day}", "name": "day", "text": "Notes of {day}."}],
		"prompts": [
			{"name": "review", "description": "review a file", "arguments": [
				{"name": "lang", "required": true, "values": ["go", "golang", "python"]},
				{"name": "focus"}],
			 "messages": [{"text": "Review this {lang} code for {focus}."}, {"resource": "notes://today"}, {"role": "assistant", "image": `+fmt.Sprintf("%q", png)+`, "mime_type": "image/png"}]}
		]}`), &served); err != nil {
		t.Fatal(err)
	}
	if err := served.Validate("mcp_server"); err != nil {
		t.Fatal(err)
	}
	n := nodetest.Start(t, node.Config{})
	cs := connect(t, mcp.NewServer(n, mcp.ServerOptions{Sources: []mcp.Source{served.Source()}}), nil)
	ctx := context.Background()

	if got := strings.Join(resourceURIs(t, cs), " "); got != "notes://logo notes://today" {
		t.Fatalf("resources %s", got)
	}
	res, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "notes://today"})
	if err != nil || len(res.Contents) != 1 || res.Contents[0].Text != "Buy milk." || res.Contents[0].MIMEType != "text/plain" {
		t.Fatalf("read today: %v %+v", err, res)
	}
	res, err = cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "notes://logo"})
	if err != nil || len(res.Contents) != 1 || !bytes.Equal(res.Contents[0].Blob, pixel) || res.Contents[0].MIMEType != "image/png" {
		t.Fatalf("read logo: %v %+v", err, res)
	}
	res, err = cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "notes://day/monday"})
	if err != nil || len(res.Contents) != 1 || res.Contents[0].Text != "Notes of monday." || res.Contents[0].URI != "notes://day/monday" {
		t.Fatalf("read a day: %v %+v", err, res)
	}
	if _, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "notes://nothing"}); err == nil {
		t.Error("reading an unknown resource succeeded")
	}

	got, err := cs.GetPrompt(ctx, &sdk.GetPromptParams{Name: "review", Arguments: map[string]string{"lang": "go", "focus": "races"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := "Review this go code for races. | resource notes://today: Buy milk. | image image/png of 33 bytes"; promptText(t, got) != want {
		t.Errorf("prompt %q, want %q", promptText(t, got), want)
	}
	if got.Messages[2].Role != "assistant" {
		t.Errorf("the image's role is %q", got.Messages[2].Role)
	}
	if _, err := cs.GetPrompt(ctx, &sdk.GetPromptParams{Name: "review"}); err == nil || !strings.Contains(err.Error(), "lang") {
		t.Errorf("a prompt without its required argument: %v", err)
	}

	comp, err := cs.Complete(ctx, &sdk.CompleteParams{Ref: &sdk.CompleteReference{Type: "ref/prompt", Name: "review"},
		Argument: sdk.CompleteParamsArgument{Name: "lang", Value: "go"}})
	if err != nil || strings.Join(comp.Completion.Values, " ") != "go golang" {
		t.Fatalf("complete: %v %+v", err, comp)
	}
	comp, err = cs.Complete(ctx, &sdk.CompleteParams{Ref: &sdk.CompleteReference{Type: "ref/prompt", Name: "review"},
		Argument: sdk.CompleteParamsArgument{Name: "focus", Value: "r"}})
	if err != nil || comp.Completion.Values == nil || len(comp.Completion.Values) != 0 {
		t.Fatalf("complete an argument without values: %v %+v", err, comp)
	}

	if err := cs.Subscribe(ctx, &sdk.SubscribeParams{URI: "notes://today"}); err != nil {
		t.Errorf("subscribe: %v", err)
	}
	if err := cs.Unsubscribe(ctx, &sdk.UnsubscribeParams{URI: "notes://today"}); err != nil {
		t.Errorf("unsubscribe: %v", err)
	}
}

// A bad "mcp_server" section is refused with the field and the reason.
func TestServedConfigIsValidated(t *testing.T) {
	cases := map[string]struct {
		cfg  mcp.ServedConfig
		want string
	}{
		"relative uri":   {mcp.ServedConfig{Resources: []mcp.ServedResource{{URI: "today", Name: "t", Text: "x"}}}, "resources[0].uri"},
		"text and file":  {mcp.ServedConfig{Resources: []mcp.ServedResource{{URI: "a://b", Name: "t", Text: "x", File: "f"}}}, "either text or file"},
		"template":       {mcp.ServedConfig{Templates: []mcp.ServedTemplate{{URITemplate: "a://b", Name: "t"}}}, "resource_templates[0].uri_template"},
		"no messages":    {mcp.ServedConfig{Prompts: []mcp.ServedPrompt{{Name: "p"}}}, "prompts[0].messages"},
		"two kinds":      {mcp.ServedConfig{Prompts: []mcp.ServedPrompt{{Name: "p", Messages: []mcp.ServedMessage{{Text: "a", Resource: "a://b"}}}}}, "exactly one"},
		"image mime":     {mcp.ServedConfig{Prompts: []mcp.ServedPrompt{{Name: "p", Messages: []mcp.ServedMessage{{Image: "x.png"}}}}}, "mime_type"},
		"interval":       {mcp.ServedConfig{ProgressInterval: "soon"}, "progress_interval"},
		"duplicate name": {mcp.ServedConfig{Prompts: []mcp.ServedPrompt{{Name: "p", Messages: []mcp.ServedMessage{{Text: "a"}}}, {Name: "p", Messages: []mcp.ServedMessage{{Text: "a"}}}}}, "declared twice"},
	}
	for name, c := range cases {
		err := c.cfg.Validate("mcp_server")
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "mcp_server.") {
			t.Errorf("%s: %v, want an error naming %q", name, err, c.want)
		}
	}
}

// The node's skills: each one's instructions are a prompt, its files resources
// skill://NAME/PATH (text or blob), and the template reads a file added later;
// reads stay in the skill's folder.
func TestSkillSource(t *testing.T) {
	dir := t.TempDir()
	write := func(rel string, b []byte) {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("pdf/SKILL.md", []byte("---\nname: pdf\ndescription: Fill in PDF forms.\n---\n# Forms\n\nRead references/fields.md.\n"))
	write("pdf/references/fields.md", []byte("Field names are case-sensitive.\n"))
	write("pdf/assets/logo.png", pixel)
	write("secret.txt", []byte("outside"))
	set, _, err := skills.Load(skills.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	n := nodetest.Start(t, node.Config{})
	cs := connect(t, mcp.NewServer(n, mcp.ServerOptions{Sources: []mcp.Source{mcp.SkillSource(set)}}), nil)
	ctx := context.Background()

	if got := strings.Join(resourceURIs(t, cs), " "); got != "skill://pdf/assets/logo.png skill://pdf/references/fields.md" {
		t.Fatalf("resources %s", got)
	}
	res, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "skill://pdf/references/fields.md"})
	if err != nil || res.Contents[0].Text != "Field names are case-sensitive.\n" || res.Contents[0].MIMEType != "text/markdown" {
		t.Fatalf("read fields.md: %v %+v", err, res)
	}
	res, err = cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: mcp.SkillURI("pdf", "assets/logo.png")})
	if err != nil || !bytes.Equal(res.Contents[0].Blob, pixel) || res.Contents[0].MIMEType != "image/png" {
		t.Fatalf("read logo.png: %v %+v", err, res)
	}
	write("pdf/references/late.md", []byte("added later"))
	res, err = cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "skill://pdf/references/late.md"})
	if err != nil || res.Contents[0].Text != "added later" {
		t.Fatalf("read a file added after the listing: %v %+v", err, res)
	}
	for _, uri := range []string{"skill://pdf/../secret.txt", "skill://pdf/%2E%2E/secret.txt", "skill://pdf/SKILL.md", "skill://nobody/x.md"} {
		if res, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: uri}); err == nil {
			t.Errorf("%s was read: %+v", uri, res.Contents)
		}
	}

	prompts, err := cs.ListPrompts(ctx, nil)
	if err != nil || len(prompts.Prompts) != 1 || prompts.Prompts[0].Name != "pdf" || prompts.Prompts[0].Description != "Fill in PDF forms." {
		t.Fatalf("prompts: %v %+v", err, prompts)
	}
	got, err := cs.GetPrompt(ctx, &sdk.GetPromptParams{Name: "pdf", Arguments: map[string]string{"task": "fill form 1040"}})
	if err != nil || promptText(t, got) != "# Forms\n\nRead references/fields.md.\n\nTask: fill form 1040" {
		t.Fatalf("prompt pdf: %v %q", err, promptText(t, got))
	}
}

// The resources, templates and prompts of the MCP servers the node is a client of
// reach the node's own clients: resources with their URIs, prompts as
// "<server>__<prompt>"; a subscription goes to the server, and its update comes
// back.
func TestServerProxiesItsServersResourcesAndPrompts(t *testing.T) {
	subscribed := make(chan string, 4)
	upstream := sdk.NewServer(&sdk.Implementation{Name: "up", Version: "1"}, &sdk.ServerOptions{
		SubscribeHandler: func(_ context.Context, r *sdk.SubscribeRequest) error { subscribed <- "on " + r.Params.URI; return nil },
		UnsubscribeHandler: func(_ context.Context, r *sdk.UnsubscribeRequest) error {
			subscribed <- "off " + r.Params.URI
			return nil
		},
	})
	upstream.AddResource(&sdk.Resource{URI: "file:///notes.txt", Name: "notes", MIMEType: "text/plain"},
		func(_ context.Context, r *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
			return &sdk.ReadResourceResult{Contents: mcp.TextContents(r.Params.URI, "text/plain", "upstream notes")}, nil
		})
	upstream.AddResourceTemplate(&sdk.ResourceTemplate{URITemplate: "file:///logs/{day}", Name: "logs"},
		func(_ context.Context, r *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
			return &sdk.ReadResourceResult{Contents: mcp.TextContents(r.Params.URI, "text/plain", "log of "+r.Params.URI)}, nil
		})
	upstream.AddPrompt(&sdk.Prompt{Name: "greet", Arguments: []*sdk.PromptArgument{{Name: "who", Required: true}}},
		func(_ context.Context, r *sdk.GetPromptRequest) (*sdk.GetPromptResult, error) {
			return &sdk.GetPromptResult{Messages: []*sdk.PromptMessage{{Role: "user", Content: &sdk.TextContent{Text: "Hello, " + r.Params.Arguments["who"]}}}}, nil
		})
	c := startClient(t, map[string]mcp.ServerConfig{"up": {Transport: mcp.InProcess(upstream)}}, nil)
	n := nodetest.Start(t, node.Config{ToolCatalog: c})
	srv := mcp.NewServer(n, mcp.ServerOptions{Changed: c.Changed, Sources: []mcp.Source{c}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go srv.Run(ctx)
	updated := make(chan string, 4)
	promptsChanged := make(chan struct{}, 16)
	cs := connect(t, srv, &sdk.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, r *sdk.ResourceUpdatedNotificationRequest) {
			updated <- r.Params.URI
		},
		PromptListChangedHandler: func(context.Context, *sdk.PromptListChangedRequest) { promptsChanged <- struct{}{} },
	})
	waitFor(t, 10*time.Second, "the upstream resource offered", func() bool {
		return slices.Contains(resourceURIs(t, cs), "file:///notes.txt")
	})
	res, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "file:///notes.txt"})
	if err != nil || res.Contents[0].Text != "upstream notes" {
		t.Fatalf("read: %v %+v", err, res)
	}
	res, err = cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "file:///logs/monday"})
	if err != nil || res.Contents[0].Text != "log of file:///logs/monday" {
		t.Fatalf("read through the template: %v %+v", err, res)
	}
	got, err := cs.GetPrompt(ctx, &sdk.GetPromptParams{Name: "up__greet", Arguments: map[string]string{"who": "Ada"}})
	if err != nil || promptText(t, got) != "Hello, Ada" {
		t.Fatalf("prompt: %v %+v", err, got)
	}

	// A prompt the server adds reaches the node's clients.
	upstream.AddPrompt(&sdk.Prompt{Name: "bye"}, func(context.Context, *sdk.GetPromptRequest) (*sdk.GetPromptResult, error) {
		return &sdk.GetPromptResult{Messages: []*sdk.PromptMessage{{Role: "user", Content: &sdk.TextContent{Text: "Bye"}}}}, nil
	})
	waitFor(t, 10*time.Second, "up__bye offered", func() bool {
		select {
		case <-promptsChanged:
		case <-time.After(100 * time.Millisecond):
		}
		got, err := cs.GetPrompt(ctx, &sdk.GetPromptParams{Name: "up__bye"})
		return err == nil && promptText(t, got) == "Bye"
	})

	if err := cs.Subscribe(ctx, &sdk.SubscribeParams{URI: "file:///notes.txt"}); err != nil {
		t.Fatal(err)
	}
	expect := func(ch chan string, want string) {
		t.Helper()
		select {
		case got := <-ch:
			if got != want {
				t.Fatalf("got %q, want %q", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no %q within 10 s", want)
		}
	}
	expect(subscribed, "on file:///notes.txt")
	// The SDKs record a subscription after its handler returns: the update is sent
	// again until it comes.
	waitFor(t, 10*time.Second, "the update of file:///notes.txt", func() bool {
		if err := upstream.ResourceUpdated(ctx, &sdk.ResourceUpdatedNotificationParams{URI: "file:///notes.txt"}); err != nil {
			t.Fatal(err)
		}
		select {
		case uri := <-updated:
			return uri == "file:///notes.txt"
		case <-time.After(100 * time.Millisecond):
			return false
		}
	})
	if err := cs.Unsubscribe(ctx, &sdk.UnsubscribeParams{URI: "file:///notes.txt"}); err != nil {
		t.Fatal(err)
	}
	expect(subscribed, "off file:///notes.txt")

}

// notes collects a client's progress and log notifications.
type notes struct {
	mu       sync.Mutex
	progress []*sdk.ProgressNotificationParams
	logs     []string
	seen     chan struct{} // one per notification
}

func (n *notes) options() *sdk.ClientOptions {
	return &sdk.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *sdk.ProgressNotificationClientRequest) {
			n.mu.Lock()
			n.progress = append(n.progress, r.Params)
			n.mu.Unlock()
			n.seen <- struct{}{}
		},
		LoggingMessageHandler: func(_ context.Context, r *sdk.LoggingMessageRequest) {
			n.mu.Lock()
			n.logs = append(n.logs, fmt.Sprintf("%s %v", r.Params.Level, r.Params.Data))
			n.mu.Unlock()
		},
	}
}

// last waits until a progress notification with its total came, and returns
// them all.
func (n *notes) last(t *testing.T) []*sdk.ProgressNotificationParams {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		n.mu.Lock()
		p := slices.Clone(n.progress)
		n.mu.Unlock()
		if len(p) > 0 && p[len(p)-1].Total > 0 {
			return p
		}
		select {
		case <-n.seen:
		case <-deadline:
			t.Fatalf("no final progress notification within 10 s; got %d", len(p))
		}
	}
}

// run_task with a progressToken reports each event of its task as progress, and
// logs at the level the client set.
func TestRunTaskReportsProgress(t *testing.T) {
	n := nodetest.Start(t, node.Config{Model: answerScript(t, "forty-two"), Tools: []tools.Tool{tools.Calculator{}}})
	got := &notes{seen: make(chan struct{}, 64)}
	cs := connect(t, mcp.NewServer(n, mcp.ServerOptions{}), got.options())
	ctx := context.Background()
	// The client asks for logs at debug level in the request (the protocol of
	// 2026-07-28; an older client sets it with logging/setLevel).
	params := &sdk.CallToolParams{Name: "run_task", Arguments: map[string]any{"input": "what is 6*7?"}, Meta: sdk.Meta{sdk.MetaKeyLogLevel: "debug"}}
	params.SetProgressToken("task-1")
	res, err := cs.CallTool(ctx, params)
	if err != nil || res.IsError || textOf(res) != "forty-two" {
		t.Fatalf("run_task: %v %q", err, textOf(res))
	}
	progress := got.last(t)
	var msgs []string
	for i, p := range progress {
		if p.ProgressToken != "task-1" || (i > 0 && p.Progress <= progress[i-1].Progress) {
			t.Errorf("notification %d: token %v, progress %v after %v", i, p.ProgressToken, p.Progress, progress[max(i-1, 0)].Progress)
		}
		msgs = append(msgs, p.Message)
	}
	joined := strings.Join(msgs, "\n")
	for _, want := range []string{"run_task: started", "the model answered", "calling tool calculator", "tool calculator answered", "run_task: done"} {
		if !strings.Contains(joined, want) {
			t.Errorf("no progress %q in\n%s", want, joined)
		}
	}
	if p := progress[len(progress)-1]; p.Total != p.Progress {
		t.Errorf("the last notification is %v of %v", p.Progress, p.Total)
	}
	got.mu.Lock()
	logs := strings.Join(got.logs, "\n")
	got.mu.Unlock()
	if !strings.Contains(logs, "info run_task: calling tool calculator") || !strings.Contains(logs, "debug run_task: started") {
		t.Errorf("logs:\n%s", logs)
	}
}

// gateTool answers when its gate opens.
type gateTool struct{ gate chan struct{} }

func (gateTool) Spec() messages.ToolSpec {
	return messages.ToolSpec{Name: "gate", Description: "waits for its gate", Parameters: json.RawMessage(`{"type":"object"}`)}
}

func (g gateTool) Call(ctx context.Context, _ tools.Call) (string, error) {
	select {
	case <-g.gate:
		return "opened", nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// A tool call that runs on reports that it runs, every ProgressInterval, and its
// end; without a progressToken it only logs.
func TestLongToolCallReportsProgress(t *testing.T) {
	gate := gateTool{gate: make(chan struct{})}
	n := nodetest.Start(t, node.Config{Tools: []tools.Tool{gate}})
	got := &notes{seen: make(chan struct{}, 64)}
	cs := connect(t, mcp.NewServer(n, mcp.ServerOptions{ProgressInterval: 10 * time.Millisecond}), got.options())
	ctx := context.Background()
	params := &sdk.CallToolParams{Name: "gate", Meta: sdk.Meta{sdk.MetaKeyLogLevel: "info"}}
	params.SetProgressToken(7)
	done := make(chan *sdk.CallToolResult, 1)
	go func() {
		res, err := cs.CallTool(ctx, params)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	for range 3 { // the start and two heartbeats
		select {
		case <-got.seen:
		case <-time.After(10 * time.Second):
			t.Fatal("fewer than 3 progress notifications within 10 s")
		}
	}
	close(gate.gate)
	if res := <-done; textOf(res) != "opened" {
		t.Fatalf("gate: %q", textOf(res))
	}
	progress := got.last(t)
	if !strings.Contains(progress[1].Message, "tool gate: running for") || !strings.Contains(progress[len(progress)-1].Message, "tool gate: done") {
		t.Errorf("progress %q … %q", progress[1].Message, progress[len(progress)-1].Message)
	}
	got.mu.Lock()
	defer got.mu.Unlock()
	if len(got.logs) != 0 { // the start, heartbeats and end are debug lines
		t.Errorf("logs at info: %q", got.logs)
	}
}

// watchedNotes is a catalog of one resource, notes://today, whose Watch sends
// each of its calls on watched, in the words report gives it.
func watchedNotes(report func(uri string, on bool) string) (src mcp.Catalog, watched chan string) {
	watched = make(chan string, 8)
	src = mcp.Catalog{Resources: []mcp.Resource{{
		Resource: sdk.Resource{URI: "notes://today", Name: "today"},
		Read: func(_ context.Context, uri string) ([]*sdk.ResourceContents, error) {
			return mcp.TextContents(uri, "text/plain", "x"), nil
		},
		Watch: func(_ context.Context, uri string, on bool) error {
			watched <- report(uri, on)
			return nil
		},
	}}}
	return src, watched
}

// expectWatch waits up to 10 s for the next call of a Watch reported on watched,
// and fails the test unless it is want.
func expectWatch(t *testing.T, watched <-chan string, want string) {
	t.Helper()
	select {
	case got := <-watched:
		if got != want {
			t.Fatalf("watch %s, want %s", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no watch %s within 10 s", want)
	}
}

// A resource's Watch is turned on by the first session that subscribes and off
// when the last one leaves.
func TestSubscriptionsAreCountedBySession(t *testing.T) {
	src, watched := watchedNotes(func(_ string, on bool) string { return fmt.Sprint(on) })
	n := nodetest.Start(t, node.Config{})
	srv := mcp.NewServer(n, mcp.ServerOptions{Sources: []mcp.Source{src}})
	a, b := connect(t, srv, nil), connect(t, srv, nil)
	ctx := context.Background()
	none := func() {
		t.Helper()
		select {
		case got := <-watched:
			t.Fatalf("watch %s, want none", got)
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := a.Subscribe(ctx, &sdk.SubscribeParams{URI: "notes://today"}); err != nil {
		t.Fatal(err)
	}
	expectWatch(t, watched, "true")
	if err := b.Subscribe(ctx, &sdk.SubscribeParams{URI: "notes://today"}); err != nil {
		t.Fatal(err)
	}
	none()
	if err := a.Unsubscribe(ctx, &sdk.UnsubscribeParams{URI: "notes://today"}); err != nil {
		t.Fatal(err)
	}
	none()
	b.Close() // leaves without unsubscribing
	expectWatch(t, watched, "false")
}

// A session that ends without unsubscribing turns its resources' Watch off as it
// ends, with no other session subscribing or unsubscribing after it: a client of
// a protocol before 2026-07-28 (whose resources/subscribe is a request that ends
// as it is answered) that closes its session over stdio, or deletes it over
// Streamable HTTP.
func TestSubscriptionOfAnEndedSessionIsForgotten(t *testing.T) {
	for _, over := range []string{"stdio", "http"} {
		t.Run(over, func(t *testing.T) {
			src, watched := watchedNotes(func(uri string, on bool) string { return fmt.Sprint(uri, " ", on) })
			n := nodetest.Start(t, node.Config{})
			srv := mcp.NewServer(n, mcp.ServerOptions{Sources: []mcp.Source{src}})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var t1 sdk.Transport
			if over == "http" {
				hs := httptest.NewServer(srv.Handler())
				defer hs.Close()
				t1 = &sdk.StreamableClientTransport{Endpoint: hs.URL}
			} else {
				st, ct := sdk.NewInMemoryTransports()
				served := make(chan error, 1)
				go func() { served <- srv.Serve(ctx, st) }()
				defer func() { cancel(); <-served }()
				t1 = ct
			}
			cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, t1,
				&sdk.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
			if err != nil {
				t.Fatal(err)
			}
			if err := cs.Subscribe(ctx, &sdk.SubscribeParams{URI: "notes://today"}); err != nil {
				t.Fatal(err)
			}
			expectWatch(t, watched, "notes://today true")
			cs.Close() // over Streamable HTTP, a DELETE
			expectWatch(t, watched, "notes://today false")
		})
	}
}

// A session closed by the session cap is resumed by its client's next request
// subscribed again (the log's record of its subscriptions stays, when the
// subscriptions of the closed session are forgotten): the client gets its
// updates and the source's Watch is left on.
func TestSubscriptionOfASessionClosedByTheCapIsResumed(t *testing.T) {
	src, watched := watchedNotes(func(_ string, on bool) string { return fmt.Sprint(on) })
	n := nodetest.Start(t, node.Config{})
	srv := mcp.NewServer(n, mcp.ServerOptions{Sources: []mcp.Source{src}, MaxSessions: 1})
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	updates := make(chan string, 1)
	opts := &sdk.ClientSessionOptions{ProtocolVersion: "2025-11-25"}
	a, err := sdk.NewClient(&sdk.Implementation{Name: "a", Version: "1"}, &sdk.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, req *sdk.ResourceUpdatedNotificationRequest) {
			select {
			case updates <- req.Params.URI:
			default:
			}
		},
	}).Connect(ctx, &sdk.StreamableClientTransport{Endpoint: hs.URL}, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Subscribe(ctx, &sdk.SubscribeParams{URI: "notes://today"}); err != nil {
		t.Fatal(err)
	}
	expectWatch(t, watched, "true")
	// A second session closes a's, idle the longest. Its client keeps no stream
	// of notifications: its session, closed in turn when a's resumes (the server
	// holds one), is not resumed by the stream's return, which would close a's
	// again and turn the Watch off with it.
	b, err := sdk.NewClient(&sdk.Implementation{Name: "b", Version: "1"}, nil).Connect(ctx,
		&sdk.StreamableClientTransport{Endpoint: hs.URL, DisableStandaloneSSE: true}, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := a.ListTools(ctx, nil); err != nil {
		t.Fatalf("a's request after its session was closed: %v", err)
	}
	for got := false; !got; {
		_ = srv.ResourceUpdated(ctx, "notes://today")
		select {
		case <-updates:
			got = true
		case <-ctx.Done():
			t.Fatal("no update after the session resumed: the subscription was lost")
		case <-time.After(100 * time.Millisecond): // the client's stream of notifications may not be there yet
		}
	}
	// The resumed session's subscribe returned before its update came: the
	// Watch was turned on again if the closed session's end turned it off.
	last := "true"
	for len(watched) > 0 {
		last = <-watched
	}
	if last != "true" {
		t.Fatalf("the Watch is left %s with a session subscribed", last)
	}
}
