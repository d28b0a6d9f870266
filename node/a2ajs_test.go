package node_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/node"
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

// TestA2AJSClient runs the JavaScript SDK's client (@a2a-js/sdk 1.x, which speaks
// A2A 0.3 to a card that says 0.3) against a node: send, stream, get task.
func TestA2AJSClient(t *testing.T) {
	modules, nodeBin := a2aJSModules(t)
	_, base := a2aNode(t, node.Config{Model: llm.Offline{}, Tools: []tools.Tool{tools.Calculator{}}})
	dir := t.TempDir()
	script, err := os.ReadFile(filepath.Join("testdata", "a2a-js-client.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "client.mjs"), script, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(modules, "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodeBin, filepath.Join(dir, "client.mjs"), base)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, stderr.String())
	}
	var out struct {
		Send struct {
			Kind, ID, ContextID, Answer string
			State                       int
		}
		Stream []string
		Get    struct {
			ID, Answer string
			State      int
		}
	}
	if err := json.Unmarshal(stdout, &out); err != nil {
		t.Fatalf("output %q: %v", stdout, err)
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
}
