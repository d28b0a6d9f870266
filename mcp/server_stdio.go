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

	"github.com/troupe-run/troupe/messages"
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
// batches (2025-06-18 on) is answered with an invalid request (-32600), and so
// is a request of a batch whose ID is one of a request in flight (id null; the
// rest of the batch is served); a request
// other than initialize and ping before initialize is answered -32600 too (the
// SDK answers it with code 0). Each answer goes out as one line, between the
// SDK's. A line longer than maxLine bytes (0: the SDK's DefaultMaxLineLength) is
// answered -32600, with the id of its request when it has one (msgScan), and
// skipped. A request whose id is a number the SDK would answer under another id
// (badRequestID) is answered -32600 too. When r ends, the session ends once the requests
// read are answered (or cancelled by the client): a client that writes its
// requests and closes its end gets every answer.
func LineTransport(r io.Reader, w io.Writer, maxLine int) sdk.Transport {
	if maxLine <= 0 {
		maxLine = sdk.DefaultMaxLineLength
	}
	t := &lineTransport{r: r, max: maxLine, inFlight: map[string]bool{}, changed: make(chan struct{}, 1)}
	t.w = &lineWriter{w: w, written: t.answered}
	return t
}

type lineTransport struct {
	r   io.Reader
	w   *lineWriter
	max int

	mu       sync.Mutex
	inFlight map[string]bool // the IDs of the requests passed on and not answered
	changed  chan struct{}   // a request was answered
}

func (t *lineTransport) Connect(ctx context.Context) (sdk.Connection, error) {
	pr, pw := io.Pipe()
	closed := make(chan struct{})
	go t.filter(pw, closed)
	return (&sdk.IOTransport{Reader: &pipeEnd{PipeReader: pr, closed: closed}, Writer: t.w}).Connect(ctx)
}

// pipeEnd is the SDK's end of the pipe; closed is closed when the SDK closes it.
type pipeEnd struct {
	*io.PipeReader
	once   sync.Once
	closed chan struct{}
}

func (p *pipeEnd) Close() error {
	p.once.Do(func() { close(p.closed) })
	return p.PipeReader.Close()
}

// track notes the requests of a message passed on, and forgets those the client
// cancels.
func (t *lineTransport) track(line []byte) {
	msgs := splitBatch(line)
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, raw := range msgs {
		msg, err := jsonrpc.DecodeMessage(raw)
		req, ok := msg.(*jsonrpc.Request)
		switch {
		case err != nil || !ok:
		case req.IsCall():
			t.inFlight[idKey(req.ID)] = true
		case req.Method == "notifications/cancelled":
			var p struct {
				RequestID any `json:"requestId"`
			}
			if json.Unmarshal(req.Params, &p) == nil {
				if id, err := jsonrpc.MakeID(p.RequestID); err == nil {
					delete(t.inFlight, idKey(id))
				}
			}
		}
	}
}

// dropOpen returns batch without its requests whose ID is one of a request in
// flight, each answered with an invalid request (id null: the answer is not the
// request in flight's); nil when none is left. The SDK would end the session at
// such a batch. A line that is no batch is returned as it is (the SDK answers a
// request that reuses an open ID itself, and goes on).
func (t *lineTransport) dropOpen(batch []byte) []byte {
	if batch[0] != '[' {
		return batch
	}
	msgs := splitBatch(batch)
	var keep []json.RawMessage
	var open []string
	t.mu.Lock()
	for _, raw := range msgs {
		msg, err := jsonrpc.DecodeMessage(raw)
		if req, ok := msg.(*jsonrpc.Request); err == nil && ok && req.IsCall() && t.inFlight[idKey(req.ID)] {
			id, _ := json.Marshal(req.ID.Raw())
			open = append(open, string(id))
			continue
		}
		keep = append(keep, raw)
	}
	t.mu.Unlock()
	for _, id := range open {
		t.answer(nil, codeInvalidRequest, "invalid request: in a batch: the id "+id+" is the id of a request still in flight; this one is not served")
	}
	if len(open) == 0 {
		return batch
	}
	if len(keep) == 0 {
		return nil
	}
	b, err := json.Marshal(keep)
	if err != nil {
		return nil
	}
	return b
}

// answered forgets the requests the server's message p (a line) answers.
func (t *lineTransport) answered(p []byte) {
	p = bytes.TrimSpace(p)
	if len(p) == 0 {
		return
	}
	msgs := splitBatch(p)
	t.mu.Lock()
	for _, raw := range msgs {
		if msg, err := jsonrpc.DecodeMessage(raw); err == nil {
			if resp, ok := msg.(*jsonrpc.Response); ok {
				delete(t.inFlight, idKey(resp.ID))
			}
		}
	}
	t.mu.Unlock()
	select {
	case t.changed <- struct{}{}:
	default:
	}
}

// drained returns when every request passed on is answered or cancelled, or the
// SDK closed the connection.
func (t *lineTransport) drained(closed <-chan struct{}) {
	for {
		t.mu.Lock()
		n := len(t.inFlight)
		t.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-t.changed:
		case <-closed:
			return
		}
	}
}

// splitBatch returns the messages of a line: its elements when it is a batch,
// else the line. (Unmarshalling a batch into a slice that holds the line would
// write its first element over the line.)
func splitBatch(line []byte) []json.RawMessage {
	if line[0] != '[' {
		return []json.RawMessage{line}
	}
	var msgs []json.RawMessage
	_ = json.Unmarshal(line, &msgs)
	return msgs
}

func idKey(id jsonrpc.ID) string { return fmt.Sprintf("%T:%v", id.Raw(), id.Raw()) }

// lineWriter serializes the writes of the SDK (a message a write) and the
// transport's own answers, and tells written of each.
type lineWriter struct {
	mu      sync.Mutex
	w       io.Writer
	written func([]byte)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.w.Write(p)
	if err == nil {
		w.written(p)
	}
	return n, err
}

func (w *lineWriter) Close() error { return nil }

// filter passes the SDK (pw) the messages of t.r and answers the other lines,
// until t.r ends (and the requests are answered) or the SDK closes its end.
func (t *lineTransport) filter(pw *io.PipeWriter, closed <-chan struct{}) {
	br := bufio.NewReaderSize(t.r, 64<<10)
	var st lineState
	for {
		line, tooLong, id, err := readLine(br, t.max)
		if tooLong {
			t.answer(id, codeInvalidRequest, fmt.Sprintf("invalid request: the message is larger than %d bytes, the most this server takes", t.max))
		} else if line = bytes.TrimSpace(messages.TrimByteOrderMark(line)); len(line) > 0 {
			if code, msg, id := st.check(line); code != 0 {
				t.answer(id, code, msg)
			} else if line = t.dropOpen(line); len(line) > 0 {
				t.track(line)
				if _, werr := pw.Write(append(line, '\n')); werr != nil {
					return // the SDK closed the connection
				}
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				t.drained(closed)
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
	type rpcError struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	b, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   rpcError        `json:"error"`
	}{"2.0", id, rpcError{code, message}})
	_, _ = t.w.Write(append(b, '\n'))
}

// readLine reads the next line of br without its newline; one longer than max
// is skipped to its end and reported tooLong, with the id of the request it
// holds (msgScan; nil when none was found).
func readLine(br *bufio.Reader, max int) (line []byte, tooLong bool, id json.RawMessage, err error) {
	var scan *msgScan
	for {
		chunk, err := br.ReadSlice('\n')
		switch {
		case scan != nil:
			scan.write(chunk)
		case len(line)+len(chunk) > max+2: // the newline (and a CR) do not count
			tooLong, scan = true, newRequestIDScan()
			scan.write(line)
			scan.write(chunk)
			line = nil
		default:
			line = append(line, chunk...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if scan != nil {
			id = scan.result()
		}
		return line, tooLong, id, err
	}
}

// requestID returns the id of a JSON-RPC 2.0 request the SDK cannot decode (its
// params nest deeper than the SDK reads), nil when it is no such request or its
// id no string or number: its client waits for an answer of that id (the
// TypeScript SDK until its request timeout, 60 s by default). A response's id
// is the server's request's, and is not answered; a message of another JSON-RPC
// version is answered with id null, as over Streamable HTTP.
func requestID(raw []byte) json.RawMessage {
	var m struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Method  *string         `json:"method"`
	}
	if json.Unmarshal(raw, &m) != nil || m.JSONRPC != "2.0" || m.Method == nil || len(m.ID) == 0 {
		return nil
	}
	if c := m.ID[0]; c == '"' || c == '-' || c >= '0' && c <= '9' {
		return m.ID
	}
	return nil
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
		return codeParseError, notJSON("the line", line), nil
	}
	if msg, id, bad := notUTF8("the line", line); bad {
		return codeParseError, msg, id
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
	if raw = bytes.TrimSpace(raw); len(raw) == 0 || raw[0] != '{' {
		return codeInvalidRequest, "invalid request: not a JSON-RPC 2.0 message (a JSON object)", nil
	}
	msg, err := jsonrpc.DecodeMessage(raw)
	if err != nil {
		return codeInvalidRequest, "invalid request: not a JSON-RPC 2.0 message: " + err.Error(), requestID(raw)
	}
	req, ok := msg.(*jsonrpc.Request)
	if !ok {
		return 0, "", nil
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(raw, &fields) == nil {
		if msg, bad := badRequestID(fields); bad {
			return codeInvalidRequest, msg, nil
		}
		if msg, bad := badProgressToken(fields); bad {
			return codeInvalidParams, msg, fields["id"]
		}
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
