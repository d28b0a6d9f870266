//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// A stdio MCP server that does not notice its stdin close (it never reads it) goes
// with the node that started it when that node is killed with SIGKILL: the kernel
// sends it the node's parent-death signal. Before, it ran on as an orphan.
func TestStdioMCPServerEndsWithAKilledNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a node process")
	}
	clearLLMEnv(t)
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "server.pid")
	server := filepath.Join(dir, "server.sh")
	if err := os.WriteFile(server, []byte("#!/bin/sh\necho $$ > "+pidFile+"\nexec sleep 600\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg, _ := json.Marshal(map[string]any{"mcp_servers": map[string]any{"sleepy": map[string]any{"command": server}}})
	config := filepath.Join(dir, "troupe.json")
	script := filepath.Join(dir, "script.json")
	for path, b := range map[string][]byte{config: cfg, script: []byte(`{"name":"scripted","steps":[{"content":"done"}]}`)} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	node := startChildWith(t, dir, script, filepath.Join(dir, "records.txt"), filepath.Join(dir, "model.txt"), nil, "--config", config)
	defer func() { _ = node.cmd.Process.Kill(); _ = node.cmd.Wait() }()
	var pid int
	waitFor(t, 20*time.Second, "the MCP server to start", func() bool {
		b, _ := os.ReadFile(pidFile)
		pid, _ = strconv.Atoi(string(bytes.TrimSpace(b)))
		return pid > 0
	})
	defer func() { _ = syscall.Kill(pid, syscall.SIGKILL) }()
	if !running(pid) {
		t.Fatalf("the MCP server %d is not running before the node is killed: the test proves nothing\n%s", pid, node.stderr.String())
	}
	node.kill9(t)
	deadline := time.Now().Add(5 * time.Second)
	for running(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("the MCP server %d still runs 5 s after its node was killed with SIGKILL", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// running reports whether process pid exists and is not a zombie (an orphan's
// exit is reaped by whoever adopted it, which may take its time).
func running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses: "pid (comm) S ...".
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}
