package nodeconfig

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/tools"
)

// The node runs its stdio MCP servers' command lines, and runs them again when
// it reconnects one: a files tool whose root holds the script a server runs
// (python3 server.py, ./bin/server) must not rewrite it, or a model would run
// code of its own writing. Other files of the root stay the model's.
func TestAgentFilesToolLeavesTheMCPServersScripts(t *testing.T) {
	root := t.TempDir()
	for _, p := range []string{"srv/server.py", "bin/server", "data.txt"} {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte("x"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	fc := File{
		Tools: ToolsFile{Files: &FilesFile{Root: root}},
		MCPServers: map[string]mcp.ServerConfig{
			"py":  {Command: "python3", Args: []string{"-u", "server.py", "--port", "0"}, Dir: filepath.Join(root, "srv")},
			"bin": {Command: filepath.Join(root, "bin", "server")},
			"web": {URL: "https://mcp.example/mcp"},
		},
	}
	a, err := fc.Agent(AgentOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var files tools.Tool
	for _, tl := range a.Tools {
		if tl.Spec().Name == "files" {
			files = tl
		}
	}
	if files == nil {
		t.Fatal("no files tool")
	}
	call := func(path string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := files.Call(ctx, tools.Call{Key: "k", Arguments: `{"op":"write","args":{"path":"` + path + `","content":"pwned"}}`})
		return err
	}
	for _, p := range []string{"srv/server.py", "bin/server"} {
		if err := call(p); !errors.Is(err, tools.ErrProtected) {
			t.Errorf("write %s: %v; want ErrProtected", p, err)
		}
		if b, _ := os.ReadFile(filepath.Join(root, p)); string(b) != "x" {
			t.Errorf("%s is now %q", p, b)
		}
	}
	if err := call("data.txt"); err != nil {
		t.Errorf("write data.txt: %v", err)
	}
}
