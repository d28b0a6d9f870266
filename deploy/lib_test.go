package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStartBgKeepsNoCallerDescriptor starts a process with lib.sh's start_bg
// from a shell that holds extra descriptors, as services.sh up holds its
// stdout on fd 3, and checks that the process has only stdin, stdout and
// stderr: an inherited pipe would keep `eval "$(deploy/services.sh up)"`
// waiting for the end of its output as long as the service runs.
func TestStartBgKeepsNoCallerDescriptor(t *testing.T) {
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("no setsid on this machine")
	}
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		t.Skip("no /proc on this machine")
	}
	dir := t.TempDir()
	pidfile := filepath.Join(dir, "svc.pid")
	script := `set -e
source ./lib.sh
exec 3>&1 4>/dev/null 9>/dev/null 1>&2
start_bg "$1" "$2" sleep 120
`
	// The shell's output goes to a file: with a pipe, Go would wait for every
	// holder of its write end, the started process too if the bug is back.
	out, err := os.Create(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd := exec.Command("bash", "-c", script, "bash", pidfile, filepath.Join(dir, "svc.log"))
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		b, _ := os.ReadFile(out.Name())
		t.Fatalf("start_bg: %v\n%s", err, b)
	}
	raw, err := os.ReadFile(pidfile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatalf("pid file %q: %v", raw, err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })

	// The pid is setsid's until it execs sleep; wait for that with a deadline.
	fdDir := "/proc/" + strconv.Itoa(pid) + "/fd"
	deadline := time.Now().Add(10 * time.Second)
	for {
		exe, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
		if strings.HasSuffix(exe, "/sleep") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d did not exec sleep (exe %q)", pid, exe)
		}
		time.Sleep(20 * time.Millisecond)
	}
	entries, err := os.ReadDir(fdDir)
	if err != nil {
		t.Fatal(err)
	}
	var leaked []string
	for _, e := range entries {
		if n, err := strconv.Atoi(e.Name()); err == nil && n >= 3 && n <= 9 {
			target, _ := os.Readlink(filepath.Join(fdDir, e.Name()))
			leaked = append(leaked, e.Name()+" -> "+target)
		}
	}
	sort.Strings(leaked)
	if len(leaked) > 0 {
		t.Fatalf("the started process holds the caller's descriptors %v", leaked)
	}
}
