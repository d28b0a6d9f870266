package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	"syscall"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/internal/childproc"
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
	sent      *sentKeys // the keys of the tool calls written whole (stdioConn)
	taskOnly  *taskOnlyTools
	// listChanged is called with each list_changed notification as it is read,
	// before the messages after it (stdioConn.Read); nil: not called.
	listChanged func()
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
	// childproc: a node killed with SIGKILL takes the server with it.
	if err := childproc.Start(t.cmd); err != nil {
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
	return &stdioConn{Connection: conn, cmd: t.cmd, sent: t.sent, taskOnly: t.taskOnly, listChanged: t.listChanged}, nil
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
// object or a batch (an array of objects), a whole value at a time, and skips any
// line that starts otherwise, logging it (cut at 1 KiB; the first at warning level,
// the others at debug level). It follows the JSON values it passes (msgScan: their
// strings and nesting), so a message written over several lines passes whole.
//
// A value longer than limit is not passed on: the SDK's reader would fail on it
// and close the connection, failing every call in flight, and the call it answered
// would be sent again to the server started anew, which performs it again (and
// answers as much again). A response (an object with an "id" and no "method") is
// replaced by an error response to its id, which fails its call alone; anything
// else is dropped and logged.
type jsonLines struct {
	r     *bufio.Reader
	log   *slog.Logger
	limit int // of one value (0: maxStdioMessage)

	out []byte // what Read hands on next

	// The value being read (while scan.open).
	scan msgScan // its strings and nesting, and, when an object, its "method" and "id"
	val  []byte  // the value so far, while at most limit
	over bool    // it is longer than limit
	size int

	skipping bool
	skipped  []byte // the head of the line being skipped
	logged   int
}

// maxStdioMessage is the most of one message a stdio server's stdout gives the
// SDK: its own bound (sdk.DefaultMaxLineLength), less room for the white space
// before the message, which the SDK counts too.
const maxStdioMessage = sdk.DefaultMaxLineLength - 1<<10

func (j *jsonLines) Read(p []byte) (int, error) {
	for len(j.out) == 0 {
		if j.plainRun() {
			continue
		}
		c, err := j.r.ReadByte()
		if err != nil {
			if j.skipping {
				j.endSkip()
			}
			// A value cut short goes on as it is: the SDK's reader says what
			// is wrong.
			j.out, j.val = append(j.out, j.val...), nil
			if len(j.out) == 0 {
				return 0, err
			}
			break
		}
		j.step(c)
	}
	n := copy(p, j.out)
	j.out = j.out[n:]
	return n, nil
}

func (j *jsonLines) step(c byte) {
	switch {
	case j.skipping:
		if c == '\n' {
			j.endSkip()
		} else if len(j.skipped) < maxLogLine {
			j.skipped = append(j.skipped, c)
		}
	case j.scan.open():
		j.scan.step(c)
		j.keep(c)
		if j.scan.ended {
			j.endValue()
		}
	case c == '{' || c == '[' && j.batchAhead():
		j.over, j.size = false, 0
		j.scan.reset()
		j.scan.accept = json.Valid
		j.scan.step(c)
		j.keep(c)
	case c == ' ' || c == '\t' || c == '\r' || c == '\n':
		j.out = append(j.out, c)
	default:
		j.skipping = true
		j.skipped = append(j.skipped[:0], c)
	}
}

// plainRun takes, at once, the bytes buffered ahead that lie inside a string of
// the value and change nothing of what scan follows (no quote, no backslash, not
// a member's name or the "id" it keeps), and reports whether it took any. A result
// of megabytes is mostly one string: a byte at a time, its scan cost 25 ns a byte
// (a quarter of a second for 10 MiB, and twenty seconds under the race detector on
// a busy machine) on top of the SDK's own reading.
func (j *jsonLines) plainRun() bool {
	if j.skipping || !j.scan.plainString() {
		return false
	}
	buf, _ := j.r.Peek(j.r.Buffered())
	n := len(buf)
	if i := bytes.IndexAny(buf, "\"\\"); i >= 0 {
		n = i
	}
	if n == 0 {
		return false
	}
	j.size += n
	if !j.over {
		if len(j.val)+n > j.limitOrDefault() {
			j.over, j.val = true, nil
		} else {
			j.val = append(j.val, buf[:n]...)
		}
	}
	_, _ = j.r.Discard(n)
	return true
}

// keep adds c to the value, up to limit.
func (j *jsonLines) keep(c byte) {
	j.size++
	if j.over {
		return
	}
	if len(j.val) >= j.limitOrDefault() {
		j.over, j.val = true, nil
		return
	}
	j.val = append(j.val, c)
}

// endValue hands on the value just read, or, when it was longer than limit, an
// error response to its id in its place.
func (j *jsonLines) endValue() {
	if !j.over {
		j.out, j.val = j.val, nil
		return
	}
	id := j.scan.result() // valid JSON (accept), white space outside strings left out
	if j.scan.object && !j.scan.hasMethod && len(id) > 0 {
		j.log.Warn("mcp server answered more than the node reads of one message; the call fails", "bytes", j.size, "id", string(id))
		msg := fmt.Sprintf("the server's answer is %d bytes, larger than %d, the most the node reads of one message", j.size, j.limitOrDefault())
		resp, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(id), "error": map[string]any{"code": -32603, "message": msg}})
		j.out = append(resp, '\n')
		return
	}
	j.log.Warn("mcp server wrote a message larger than the node reads of one; dropped", "bytes", j.size)
}

func (j *jsonLines) limitOrDefault() int {
	if j.limit == 0 {
		return maxStdioMessage
	}
	return j.limit
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
