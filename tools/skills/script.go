package skills

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/troupe-run/troupe/internal/childproc"
)

// ErrScriptsDisabled answers a script run when Config.AllowScripts is off.
var ErrScriptsDisabled = errors.New(`running skill scripts is disabled on this node; its operator can allow it with "skills": {"allow_scripts": true} in the node's configuration`)

// interpreters run scripts by extension; any other script must be executable.
var interpreters = map[string]string{".sh": "sh", ".bash": "bash", ".py": "python3"}

// RunScript runs the script at path (in the skill's scripts/ folder; "x.sh" means
// "scripts/x.sh") of skill name with args, in the skill's folder, with a minimal
// environment, for at most Config.ScriptTimeout. It returns the script's output
// (stdout then stderr, at most MaxOutputBytes); a script that fails or runs out of
// time is an error that carries its output.
func (s *Set) RunScript(ctx context.Context, name, path string, args []string) (string, error) {
	if !s.cfg.AllowScripts {
		return "", ErrScriptsDisabled
	}
	k, ok := s.Get(name)
	if !ok {
		return "", noSkill(name, s.names(name))
	}
	rel, err := confine(path)
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(filepath.ToSlash(rel), "scripts/") {
		rel = filepath.Join("scripts", rel)
	}
	root, err := openFolder(k)
	if err != nil {
		return "", err
	}
	info, err := root.Lstat(rel)
	root.Close()
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("skill %s has no script %q", name, filepath.ToSlash(rel))
	case err != nil:
		return "", fmt.Errorf("skill %s: script %q: %w", name, filepath.ToSlash(rel), stripRoot(err))
	case !info.Mode().IsRegular():
		// A symlink is refused even when it stays inside: exec would follow it after
		// the check.
		return "", fmt.Errorf("skill %s: script %q is not a regular file", name, filepath.ToSlash(rel))
	}
	abs := filepath.Join(k.Dir, rel)
	var cmd *exec.Cmd
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ScriptTimeout)
	defer cancel()
	if interp, ok := interpreters[filepath.Ext(rel)]; ok {
		cmd = exec.CommandContext(ctx, interp, append([]string{abs}, args...)...)
	} else if info.Mode()&0o111 != 0 {
		cmd = exec.CommandContext(ctx, abs, args...)
	} else {
		return "", fmt.Errorf("skill %s: script %q is neither executable nor a .sh, .bash or .py file", name, filepath.ToSlash(rel))
	}
	cmd.Dir = k.Dir
	// The node's environment holds API keys: the script gets none of it but PATH.
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + k.Dir, "LANG=C.UTF-8", "SKILL_DIR=" + k.Dir}
	out := &limitedBuffer{max: s.cfg.MaxOutputBytes}
	err = run(cmd, out)
	script := filepath.ToSlash(rel)
	switch {
	case ctx.Err() != nil && errors.Is(context.Cause(ctx), context.DeadlineExceeded) && err != nil:
		return "", fmt.Errorf("skill %s: script %s ran past its timeout of %s and was stopped; output so far:\n%s", name, script, s.cfg.ScriptTimeout, out)
	case ctx.Err() != nil && err != nil:
		return "", fmt.Errorf("skill %s: script %s was stopped: %w", name, script, context.Cause(ctx))
	case err != nil:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return "", fmt.Errorf("skill %s: script %s exited with status %d; output:\n%s", name, script, exit.ExitCode(), out)
		}
		return "", fmt.Errorf("skill %s: script %s: %w", name, script, err)
	}
	return out.String(), nil
}

// run runs cmd with its stdout and stderr copied into out, and kills its process
// group when the script ends, by itself or by its context: a child it left behind
// (sleep 300 &) does not outlive it, nor keep its output open. A child that left
// the group (setsid) is beyond its reach.
func run(cmd *exec.Cmd, out io.Writer) error {
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	defer pr.Close()
	cmd.Stdout, cmd.Stderr = pw, pw
	killGroup(cmd)
	err = childproc.Start(cmd) // a node killed with SIGKILL takes the script with it

	pw.Close()
	if err != nil {
		return err
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(out, pr)
	}()
	err = cmd.Wait()
	stopGroup(cmd)
	select {
	case <-copied:
	case <-time.After(time.Second):
		// A child outside the group still holds the output open: stop reading.
		pr.Close()
		<-copied
	}
	return err
}
