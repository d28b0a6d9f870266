package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// The SDK's stdio transport ends the session at the first line that is not a
// JSON-RPC message (and at an empty batch, or a batch the protocol version does
// not take), and with it every call in flight. LineTransport reads the lines
// first: it passes the SDK the messages and answers the others itself, as
// JSON-RPC 2.0 says, and the session goes on.

// LineTransport is the transport of a client over newline-delimited JSON-RPC on r
// (the client's messages) and w (the server's), such as a process's stdin and
// stdout. A line that is not JSON is answered with a parse error (-32700, id
// null); JSON that is no JSON-RPC 2.0 message, a batch that is empty, holds
// something else or repeats an ID, or a batch at a protocol version without
// batches (2025-06-18 on) is answered with an invalid request (-32600); a request
// other than initialize and ping before initialize is answered -32600 too (the
// SDK answers it with code 0). Each answer goes out as one line, between the
// SDK's. A line longer than maxLine bytes (0: the SDK's DefaultMaxLineLength) is
// answered -32600 and skipped. The session ends when r ends.
func LineTransport(r io.Reader, w io.Writer, maxLine int) sdk.Transport {
	if maxLine <= 0 {
		maxLine = sdk.DefaultMaxLineLength
	}
	return &lineTransport{r: r, w: &lineWriter{w: w}, max: maxLine}
}

type lineTransport struct {
	r   io.Reader
	w   *lineWriter
	max int
}

func (t *lineTransport) Connect(ctx context.Context) (sdk.Connection, error) {
	pr, pw := io.Pipe()
	go t.filter(pw)
	return (&sdk.IOTransport{Reader: pr, Writer: t.w}).Connect(ctx)
}

// lineWriter serializes the writes of the SDK (a message a write) and the
// transport's own answers.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

func (w *lineWriter) Close() error { return nil }

// filter passes the SDK (pw) the messages of t.r and answers the other lines,
// until t.r ends or the SDK closes its end.
func (t *lineTransport) filter(pw *io.PipeWriter) {
	br := bufio.NewReaderSize(t.r, 64<<10)
	var st lineState
	for {
		line, tooLong, err := readLine(br, t.max)
		if tooLong {
			t.answer(nil, codeInvalidRequest, fmt.Sprintf("invalid request: the message is larger than %d bytes, the most this server takes", t.max))
		} else if line = bytes.TrimSpace(line); len(line) > 0 {
			if code, msg, id := st.check(line); code != 0 {
				t.answer(id, code, msg)
			} else if _, werr := pw.Write(append(line, '\n')); werr != nil {
				return // the SDK closed the connection
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				pw.Close()
			} else {
				pw.CloseWithError(err)
			}
			return
		}
	}
}

func (t *lineTransport) answer(id json.RawMessage, code int, message string) {
	if id == nil {
		id = json.RawMessage("null")
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": code, "message": message}})
	_, _ = t.w.Write(append(b, '\n'))
}

// readLine reads the next line of br without its newline; one longer than max
// is skipped to its end and reported tooLong.
func readLine(br *bufio.Reader, max int) (line []byte, tooLong bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(chunk) > max+2 { // the newline (and a CR) do not count
				tooLong, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return line, tooLong, err
	}
}

// lineState is what check knows of the session: whether the client sent
// initialize, and at which protocol version.
type lineState struct {
	initialized bool
	version     string
}

// check returns the JSON-RPC error code, message and request ID (nil: unknown)
// of a line that the SDK must not see; code 0 for a message it takes.
func (st *lineState) check(line []byte) (code int, message string, id json.RawMessage) {
	if !json.Valid(line) {
		return codeParseError, "parse error: the line is not JSON", nil
	}
	if line[0] != '[' {
		return st.checkMessage(line)
	}
	var batch []json.RawMessage
	if err := json.Unmarshal(line, &batch); err != nil || len(batch) == 0 {
		return codeInvalidRequest, "invalid request: an empty batch", nil
	}
	if st.initialized && st.version >= "2025-06-18" {
		return codeInvalidRequest, fmt.Sprintf("invalid request: protocol version %s has no batches", st.version), nil
	}
	ids := map[string]bool{}
	for _, raw := range batch {
		if code, message, _ := st.checkMessage(raw); code != 0 {
			return code, "in a batch: " + message, nil
		}
		var m struct {
			ID json.RawMessage `json:"id"`
		}
		_ = json.Unmarshal(raw, &m)
		if len(m.ID) > 0 && string(m.ID) != "null" {
			if ids[string(m.ID)] {
				return codeInvalidRequest, "invalid request: the batch repeats the id " + string(m.ID), nil
			}
			ids[string(m.ID)] = true
		}
	}
	return 0, "", nil
}

// checkMessage checks one message (a line, or an element of a batch).
func (st *lineState) checkMessage(raw []byte) (code int, message string, id json.RawMessage) {
	msg, err := jsonrpc.DecodeMessage(raw)
	if err != nil {
		return codeInvalidRequest, "invalid request: not a JSON-RPC 2.0 message: " + err.Error(), nil
	}
	req, ok := msg.(*jsonrpc.Request)
	if !ok {
		return 0, "", nil
	}
	var m struct {
		ID     json.RawMessage `json:"id"`
		Params struct {
			ProtocolVersion string                     `json:"protocolVersion"`
			Meta            map[string]json.RawMessage `json:"_meta"`
		} `json:"params"`
	}
	_ = json.Unmarshal(raw, &m)
	switch {
	case req.Method == "initialize":
		st.initialized, st.version = true, m.Params.ProtocolVersion
	case st.initialized || !req.IsCall() || req.Method == "ping":
	case m.Params.Meta["io.modelcontextprotocol/protocolVersion"] != nil:
		// A request of the sessionless protocol, which needs no initialize.
	default:
		return codeInvalidRequest, fmt.Sprintf("invalid request: %q before initialize; the session starts with initialize", req.Method), m.ID
	}
	return 0, "", nil
}
