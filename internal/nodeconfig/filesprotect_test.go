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

// A server started as a Python module (python3 -m pkg.server) runs the code of
// the package's folder, not a file its command line names: the model must not
// rewrite pkg/__main__.py or pkg/server.py either, nor add a module there, or
// the node would run code of the model's writing when it reconnects the server.
// A module that is a file (python3 -m tool: tool.py) is kept as well, and so is
// the name of one installed elsewhere (python3 -m mcp_server_fetch): Python looks
// in the server's directory first, so a package the model made there would run
// in its place. The rest of the directory stays the model's.
func TestAgentFilesToolLeavesTheMCPServersModules(t *testing.T) {
	root := t.TempDir()
	for _, p := range []string{"srv/pkg/__init__.py", "srv/pkg/server.py", "srv/tool.py", "srv/notes.txt"} {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fc := File{
		Tools: ToolsFile{Files: &FilesFile{Root: root}},
		MCPServers: map[string]mcp.ServerConfig{
			"pkg":   {Command: "python3", Args: []string{"-u", "-m", "pkg.server"}, Dir: filepath.Join(root, "srv")},
			"tool":  {Command: "python3", Args: []string{"-m", "tool"}, Dir: filepath.Join(root, "srv")},
			"other": {Command: "python3", Args: []string{"-m", "notinstalled"}, Dir: filepath.Join(root, "srv")},
			"flags": {Command: "mcp-tool", Args: []string{"-mode", "fast"}, Dir: filepath.Join(root, "srv")},
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
	for _, p := range []string{"srv/pkg/server.py", "srv/pkg/__main__.py", "srv/pkg/json.py", "srv/tool.py", "srv/notinstalled/__main__.py", "srv/notinstalled.py"} {
		if err := call(p); !errors.Is(err, tools.ErrProtected) {
			t.Errorf("write %s: %v; want ErrProtected", p, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(root, "srv/pkg/server.py")); string(b) != "x" {
		t.Errorf("srv/pkg/server.py is now %q", b)
	}
	for _, p := range []string{"srv/notes.txt", "srv/new.txt", "srv/pkgs/x.py", "srv/ode.py", "srv/ode/x"} {
		if err := call(p); err != nil {
			t.Errorf("write %s: %v", p, err)
		}
	}
}
