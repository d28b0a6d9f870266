package node_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// a2aJSModules is the folder whose node_modules has @a2a-js/sdk (deploy/a2a-js.sh
// installs it): $TROUPE_A2A_JS, else ~/.cache/troupe-deploy/a2a-js; and the node
// binary to run it with: $TROUPE_TEST_NODE, else node on the PATH.
func a2aJSModules(t *testing.T) (modules, nodeBin string) {
	t.Helper()
	dir := os.Getenv("TROUPE_A2A_JS")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".cache", "troupe-deploy", "a2a-js")
	}
	nodeBin = os.Getenv("TROUPE_TEST_NODE")
	if nodeBin == "" {
		nodeBin = "node"
	}
	nodeBin, nodeErr := exec.LookPath(nodeBin)
	_, sdkErr := os.Stat(filepath.Join(dir, "node_modules", "@a2a-js", "sdk", "package.json"))
	if nodeErr != nil || sdkErr != nil {
		msg := "node or @a2a-js/sdk is missing (run deploy/a2a-js.sh; TROUPE_A2A_JS names its folder)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return dir, nodeBin
}

// stageA2AJS copies node/testdata/a2a-js-client.mjs into a directory of its own
// beside the SDK's modules and returns its path and the Node.js binary to run it.
func stageA2AJS(t *testing.T) (client, nodeBin string) {
	t.Helper()
	modules, nodeBin := a2aJSModules(t)
	dir := t.TempDir()
	script, err := os.ReadFile(filepath.Join("testdata", "a2a-js-client.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	client = filepath.Join(dir, "client.mjs")
	if err := os.WriteFile(client, script, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(modules, "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	return client, nodeBin
}

// runA2AJS runs node/testdata/a2a-js-client.mjs against the node at base in mode
// (default, legacy or deltas) and decodes what it prints into out.
func runA2AJS(t *testing.T, base, mode string, out any) {
	t.Helper()
	client, nodeBin := stageA2AJS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodeBin, client, base, mode)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("node (%s): %v\n%s", mode, err, stderr.String())
	}
	if err := json.Unmarshal(stdout, out); err != nil {
		t.Fatalf("output %q: %v", stdout, err)
	}
}

// a2aJSRun is what the script prints in modes default and legacy.
type a2aJSRun struct {
	Protocol string
	Send     struct {
		Kind, ID, ContextID, Answer string
		State                       int
	}
	Stream []string
	Get    struct {
		ID, Answer string
		State      int
	}
	Push *struct {
		Made, Got     string
		Listed, After int
	}
}

// TestA2AJSClient runs the JavaScript SDK's client (@a2a-js/sdk 1.x) against a node:
// as it comes (A2A 1.0, from the card's supportedInterfaces: send, stream, get, push
// notification configs) and with its 0.3 compatibility on a 0.3 card (send, stream,
// get).
func TestA2AJSClient(t *testing.T) {
	a2aJSModules(t)
	_, base := a2aNode(t, node.Config{Model: llm.Offline{}, Tools: []tools.Tool{tools.Calculator{}}})
	for _, mode := range []string{"default", "legacy"} {
		t.Run(mode, func(t *testing.T) {
			var out a2aJSRun
			runA2AJS(t, base, mode, &out)
			if want := map[string]string{"default": "1.0", "legacy": "0.3"}[mode]; out.Protocol != want {
				t.Fatalf("the client speaks %q, want %q", out.Protocol, want)
			}
			const completed = 3 // TASK_STATE_COMPLETED
			if out.Send.Kind != "task" || out.Send.State != completed || out.Send.Answer != "hello from js" || !strings.HasPrefix(out.Send.ContextID, "a2a-") {
				t.Fatalf("send: %+v", out.Send)
			}
			want := []string{"task:1", "status:2", "status:2:calling tool calculator", "artifact:42", "status:3:42"}
			if strings.Join(out.Stream, " | ") != strings.Join(want, " | ") {
				t.Fatalf("stream:\n got %q\nwant %q", out.Stream, want)
			}
			if out.Get.ID != out.Send.ID || out.Get.State != completed || out.Get.Answer != "hello from js" {
				t.Fatalf("get: %+v", out.Get)
			}
			if mode != "default" {
				return
			}
			if out.Push == nil || out.Push.Made != "hook-1 "+out.Send.ID+" https://hooks.example.com/a2a tok Bearer" ||
				out.Push.Got != "hook-1 https://hooks.example.com/a2a" || out.Push.Listed != 1 || out.Push.After != 0 {
				t.Fatalf("push configs: %+v", out.Push)
			}
		})
	}
}

// The JavaScript client (A2A 1.0) streams a provider's 100 tokens: it sees them in
// order as increments of the answer artifact, then the recorded answer as its last
// chunk and in the completed status.
func TestA2AJSClientStreamsDeltas(t *testing.T) {
	a2aJSModules(t)
	pieces := tokens(100)
	_, base := a2aStreamingNode(t, 0, func(int) openaitest.Reply {
		return openaitest.TextStream(messages.Usage{PromptTokens: 20, CompletionTokens: 100}, pieces...)
	})
	var out struct {
		Protocol  string
		Artifacts []struct {
			Append, Last bool
			Text         string
		}
		State  int
		Answer string
	}
	runA2AJS(t, base, "deltas", &out)
	if out.Protocol != "1.0" || len(out.Artifacts) < 102 {
		t.Fatalf("protocol %q, %d artifact events", out.Protocol, len(out.Artifacts))
	}
	for i, p := range pieces {
		if a := out.Artifacts[i]; a.Text != p || a.Append != (i > 0) || a.Last {
			t.Fatalf("artifact event %d: %+v, want %q", i, a, p)
		}
	}
	whole := strings.Join(pieces, "")
	last := out.Artifacts[len(out.Artifacts)-1]
	const completed = 3
	if !last.Last || last.Append || !strings.HasPrefix(whole, last.Text) || last.Text == "" || out.State != completed || out.Answer != last.Text {
		t.Fatalf("end: last artifact %+v, state %d, answer %q", last, out.State, out.Answer)
	}
}

// a2aJSLine is a line the script prints in mode subscribe.
type a2aJSLine struct {
	Event string
	End   bool
	Error string
}

// subscribeA2AJS runs the script's mode subscribe of task id against the node at
// base (or the agent whose card's URL base is), and feeds the lines it prints as
// they come (the channel closes when it exits).
func subscribeA2AJS(t *testing.T, base string, id sdk.TaskID) <-chan a2aJSLine {
	t.Helper()
	client, nodeBin := stageA2AJS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	cmd := exec.CommandContext(ctx, nodeBin, client, base, "subscribe", string(id))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	out := make(chan a2aJSLine, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(out)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var l a2aJSLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				l.Error = "undecodable line " + sc.Text()
			}
			out <- l
		}
		if err := cmd.Wait(); err != nil {
			out <- a2aJSLine{Error: fmt.Sprintf("node: %v\n%s", err, stderr.String())}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return out
}

// nextJSLine returns the script's next line (a zero one when it exited).
func nextJSLine(t *testing.T, lines <-chan a2aJSLine) a2aJSLine {
	t.Helper()
	select {
	case l := <-lines:
		return l
	case <-time.After(30 * time.Second):
		t.Fatal("the JavaScript client printed nothing within 30s")
		return a2aJSLine{}
	}
}

// The JavaScript client (A2A 1.0) subscribes to tasks after a restart: a task
// waiting for approval comes first, as it waits; approved by another client, it
// goes on to its end, which ends the stream. An ended task is refused as 1.0 says
// (UnsupportedOperationError), and so is an unknown one (TaskNotFoundError).
func TestA2AJSClientSubscribesAfterARestart(t *testing.T) {
	a2aJSModules(t)
	var sent atomic.Int64
	cfg := mailer(t, &sent)
	cfg.A2A = &node.A2AConfig{}
	cfg.DataDir = t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	url, stop := a2aNodeToStop(t, cfg)
	mailerClient, _ := a2aClient(t, url, "/a2a/mailer"+a2a.CardPath)
	res, err := mailerClient.SendMessage(ctx, &sdk.MessageSendParams{Message: userMessage("mail bob")})
	if err != nil {
		t.Fatal(err)
	}
	waiting := res.(*sdk.Task)
	if waiting.Status.State != sdk.TaskStateInputRequired {
		t.Fatalf("before the restart: %s", waiting.Status.State)
	}
	stop()

	second := nodetest.Start(t, cfg)
	api := httptest.NewServer(second.Handler())
	defer api.Close()
	mailerClient, _ = a2aClient(t, api.URL, "/a2a/mailer"+a2a.CardPath)
	const inputRequired, working, completed = "6", "2", "3"
	// The task is the mailer's: its endpoint serves it (the default agent's
	// answers that it has no such task).
	mailerCard := api.URL + "/a2a/mailer" + a2a.CardPath
	lines := subscribeA2AJS(t, mailerCard, waiting.ID)
	if l := nextJSLine(t, lines); l.Event != "task:"+inputRequired {
		t.Fatalf("the first event: %+v, want the task waiting", l)
	}
	answer := userMessage("approve")
	answer.TaskID, answer.ContextID = waiting.ID, waiting.ContextID
	if _, err := mailerClient.SendMessage(ctx, &sdk.MessageSendParams{Message: answer}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		l := nextJSLine(t, lines)
		if l.Error != "" {
			t.Fatalf("after %q: %s", got, l.Error)
		}
		if l.End {
			break
		}
		got = append(got, l.Event)
	}
	if len(got) < 3 || got[0] != "status:"+working || got[len(got)-2] != "artifact:handled" || got[len(got)-1] != "status:"+completed+":handled" {
		t.Fatalf("after the approval: %q, want working … the answer, completed", got)
	}
	for id, want := range map[sdk.TaskID]string{waiting.ID: "(Code: -32004)", sdk.TaskID(waiting.ContextID + "~0123456789abcdef0123456789abcdef"): "(Code: -32001)"} {
		if l := nextJSLine(t, subscribeA2AJS(t, mailerCard, id)); !strings.Contains(l.Error, want) {
			t.Fatalf("task %s: %+v, want error %s", id, l, want)
		}
	}
}
