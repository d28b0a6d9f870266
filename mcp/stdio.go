package mcp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	"syscall"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// stdioTransport starts a stdio server in a process group of its own, and ends
// what is left of the group when the connection closes: a server's children (a
// browser, a language server, the node that "npx" starts) do not outlive it.
//
// What the server writes on its stdout outside JSON-RPC messages (a banner, a
// log line of a console.log) is skipped and logged (jsonLines), as the MCP SDKs'
// Python and TypeScript clients skip it: the SDK's reader took it for a message
// and closed the connection, and a server that prints a banner at start never
// connected.
type stdioTransport struct {
	cmd *exec.Cmd
	// terminate is how long closing waits for the server to exit after its
	// stdin is closed, then after SIGTERM, before it kills it.
	terminate time.Duration
	log       *slog.Logger
}

func (t *stdioTransport) Connect(ctx context.Context) (sdk.Connection, error) {
	stdout, err := t.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stdin, err := t.cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := t.cmd.Start(); err != nil {
		stopGroup(t.cmd)
		return nil, err
	}
	out := &jsonLines{r: bufio.NewReaderSize(stdout, 64<<10), log: t.log}
	in := &serverStdin{WriteCloser: stdin, cmd: t.cmd, terminate: t.terminate}
	conn, err := (&sdk.IOTransport{Reader: io.NopCloser(out), Writer: in}).Connect(ctx)
	if err != nil {
		_ = in.Close()
		stopGroup(t.cmd)
		return nil, err
	}
	return &stdioConn{Connection: conn, cmd: t.cmd}, nil
}

// serverStdin is a stdio server's stdin. Closing it ends the server as the MCP
// specification asks: its stdin is closed, then it is sent SIGTERM if it did not
// exit within terminate, then SIGKILL.
type serverStdin struct {
	io.WriteCloser
	cmd       *exec.Cmd
	terminate time.Duration
}

func (s *serverStdin) Close() error {
	if err := s.WriteCloser.Close(); err != nil {
		return fmt.Errorf("closing stdin: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- s.cmd.Wait() }()
	wait := func() (error, bool) {
		select {
		case err := <-exited:
			return err, true
		case <-time.After(s.terminate):
			return nil, false
		}
	}
	if err, ok := wait(); ok {
		return err
	}
	if s.cmd.Process.Signal(syscall.SIGTERM) == nil {
		if err, ok := wait(); ok {
			return err
		}
	}
	if err := s.cmd.Process.Kill(); err != nil {
		return err
	}
	if err, ok := wait(); ok {
		return err
	}
	return errors.New("the server's process did not exit after SIGKILL")
}

// jsonLines passes on what a stdio server writes on its stdout that is a JSON
// object or a batch (an array of objects), whole, and skips any line that starts
// otherwise, logging it (cut at 1 KiB; the first at warning level, the others at
// debug level). It follows the JSON values it passes (their strings and nesting),
// so a message written over several lines passes whole.
type jsonLines struct {
	r     *bufio.Reader
	log   *slog.Logger
	depth int // of the value being passed; 0: between values
	inStr bool
	esc   bool

	skipping bool
	skipped  []byte // the head of the line being skipped
	logged   int
}

func (j *jsonLines) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if n > 0 && j.r.Buffered() == 0 {
			break // what is read so far, without waiting for more
		}
		c, err := j.r.ReadByte()
		if err != nil {
			if j.skipping {
				j.endSkip()
			}
			if n > 0 {
				return n, nil
			}
			return 0, err
		}
		switch {
		case j.skipping:
			if c == '\n' {
				j.endSkip()
			} else if len(j.skipped) < maxLogLine {
				j.skipped = append(j.skipped, c)
			}
			continue
		case j.depth > 0:
			j.follow(c)
		case c == '{' || c == '[' && j.batchAhead():
			j.depth = 1
		case c == ' ' || c == '\t' || c == '\r' || c == '\n':
		default:
			j.skipping = true
			j.skipped = append(j.skipped[:0], c)
			continue
		}
		p[n] = c
		n++
	}
	return n, nil
}

// follow tracks the strings and nesting of the value being passed.
func (j *jsonLines) follow(c byte) {
	switch {
	case j.esc:
		j.esc = false
	case j.inStr:
		switch c {
		case '\\':
			j.esc = true
		case '"':
			j.inStr = false
		}
	case c == '"':
		j.inStr = true
	case c == '{' || c == '[':
		j.depth++
	case c == '}' || c == ']':
		j.depth--
	}
}

// batchAhead reports whether the '[' just read opens a batch: the next byte but
// white space is '{' or ']' ("[INFO] starting" is a line of a log).
func (j *jsonLines) batchAhead() bool {
	for i := 1; i <= 4<<10; i++ {
		b, err := j.r.Peek(i)
		if len(b) < i || err != nil {
			return true // the decoder says what is wrong
		}
		switch b[i-1] {
		case ' ', '\t', '\r', '\n':
			continue
		case '{', ']':
			return true
		default:
			return false
		}
	}
	return true
}

func (j *jsonLines) endSkip() {
	j.skipping = false
	line := strings.TrimSpace(string(j.skipped))
	if line == "" {
		return
	}
	level := slog.LevelDebug
	if j.logged == 0 {
		level = slog.LevelWarn
	}
	j.logged++
	j.log.Log(context.Background(), level, "mcp server wrote a line that is not JSON-RPC on its stdout; skipped", "line", line)
}
