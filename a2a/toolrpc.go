package a2a

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"mime"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"

	sdk "github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"

	"github.com/troupe-run/troupe/internal/textclip"
)

// ErrAnswerTooLarge says a remote agent's answer passed one of the tool's bounds:
// what the model would read of it (its message, or its task's artifacts and
// status message, files described: ToolConfig.MaxAnswerBytes), or its bytes as
// sent, files' included (a response or a whole stream: ToolConfig.MaxStreamBytes).
var ErrAnswerTooLarge = errors.New("the remote agent's answer is too large")

// RemoteError is a JSON-RPC error a remote agent answered, as it gave it: its code,
// known to A2A or not, its message and its data.
type RemoteError struct {
	Code    int
	Message string
	Data    json.RawMessage
}

func (e *RemoteError) Error() string {
	s := fmt.Sprintf("error %d: %s", e.Code, textclip.Head(e.Message, 1000))
	if len(e.Data) > 0 && string(e.Data) != "null" {
		s += " (data: " + textclip.Head(string(e.Data), 1000) + ")"
	}
	return s
}

// rpcTransport is the tool's JSON-RPC binding of A2A 0.3: message/send,
// message/stream, tasks/get and tasks/cancel, the methods the tool sends. Unlike the SDK's
// own (a2aclient.NewJSONRPCTransport) it reads every answer within maxRaw bytes (a
// response read whole, a stream event by event, of any size up to it: the SDK's
// stream reader fails on an event of more than 64 KiB), drops the bytes of the
// file parts it reads for a description of each (withoutFileBytes), keeps a JSON-RPC error's
// code and message whatever the code, and reads an error answered as one JSON
// response to a streaming request.
type rpcTransport struct {
	url    string
	client *http.Client
	maxRaw int // ToolConfig.MaxStreamBytes
	ids    atomic.Int64
}

var _ a2aclient.Transport = (*rpcTransport)(nil)

var errNotSent = errors.New("not sent by the a2a tool")

type rpcResponse struct {
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

// result returns the response's result, or its error as a RemoteError.
func (r *rpcResponse) result() (json.RawMessage, error) {
	if r.Error != nil {
		return nil, &RemoteError{Code: r.Error.Code, Message: r.Error.Message, Data: r.Error.Data}
	}
	if len(r.Result) == 0 || string(r.Result) == "null" {
		return nil, errors.New("the remote agent answered neither a result nor an error")
	}
	return r.Result, nil
}

// post sends a JSON-RPC request and returns the HTTP response, whose status is 200.
//
// A request that is safe to send again carries idemKey as its Idempotency-Key
// header (message/send and message/stream their message's ID, which a server
// dedupes by; tasks/cancel its task's): Go's HTTP client then sends it again on a
// new connection when a kept-alive one it reused was closed by the server (an idle
// timeout, a proxy's) before any answer, where it fails a POST without one.
func (t *rpcTransport) post(ctx context.Context, method string, params any, accept, idemKey string) (*http.Response, error) {
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": t.ids.Add(1), "method": method, "params": params})
	if err != nil {
		return nil, err
	}
	// wrote: whether any attempt wrote the request. Go's transport sends a POST
	// with an Idempotency-Key again on a new connection when a reused one closes
	// unanswered, and a failed dial then is all the error says, though the agent
	// may have run the message: only a request never written reached no endpoint.
	var wrote atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteHeaders: func() { wrote.Store(true) }})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", accept)
	switch {
	case idemKey != "":
		req.Header.Set("Idempotency-Key", idemKey)
	case method == "tasks/get":
		// A read, as safe to send again, with no key a server would answer a
		// later read from: Go's transport takes a nil value as the header's mark
		// and sends none.
		req.Header["Idempotency-Key"] = nil
	}
	resp, err := t.client.Do(req)
	if err != nil {
		if op := (*net.OpError)(nil); errors.As(err, &op) && op.Op == "dial" && !wrote.Load() {
			return nil, &notThereError{err}
		}
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		msg := fmt.Sprintf("%s answered HTTP %s", method, resp.Status)
		if s := strings.TrimSpace(strings.ToValidUTF8(string(snippet), "?")); s != "" {
			msg += ": " + textclip.Head(s, 300)
		}
		switch resp.StatusCode {
		case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusGone:
			return nil, &notThereError{errors.New(msg)}
		case http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return nil, &awayError{errors.New(msg)}
		}
		return nil, errors.New(msg)
	}
	return resp, nil
}

// notThereError says a request did not reach a JSON-RPC endpoint, and ran nothing:
// no connection to its host, or an answer that the URL serves no such request
// (404, 405, 410). An agent that moved its endpoint answers so at the old one.
type notThereError struct{ err error }

func (e *notThereError) Error() string { return e.err.Error() }
func (e *notThereError) Unwrap() error { return e.err }

// awayError says a proxy in front of the agent answered that no instance of it is
// there (503, 504: none is ready, or none answered): it restarts, or is being
// moved, as a refused connection says of an agent reached directly. A 502 stays
// a failure: a proxy says so of an agent that answered wrong too.
type awayError struct{ err error }

func (e *awayError) Error() string { return e.err.Error() }
func (e *awayError) Unwrap() error { return e.err }

// away says whether err, a request's, found the agent not there: no connection to
// it, or a proxy's answer that none of its instances is (awayError).
func away(err error) bool {
	if op := (*net.OpError)(nil); errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var a *awayError
	return errors.As(err, &a)
}

// messageKey is the Idempotency-Key of a message/send or message/stream request:
// its message's ID (the call's name outside the log, the same when the call is
// performed again).
func messageKey(p *sdk.MessageSendParams) string {
	if p == nil || p.Message == nil {
		return ""
	}
	return p.Message.ID
}

// rawTooLarge is the error of an answer whose bytes as sent (its files'
// included) passed maxRaw.
func rawTooLarge(maxRaw int) error {
	return fmt.Errorf("%w: it passed %d bytes as sent, files included (the bound on what the tool reads of an answer)", ErrAnswerTooLarge, maxRaw)
}

// readAll reads a JSON-RPC response of at most maxRaw bytes.
func (t *rpcTransport) readAll(resp *http.Response) (json.RawMessage, error) {
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, int64(t.maxRaw)+1))
	if err != nil {
		return nil, fmt.Errorf("reading the answer: %w", err)
	}
	if len(b) > t.maxRaw {
		return nil, rawTooLarge(t.maxRaw)
	}
	var r rpcResponse
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("the answer is not a JSON-RPC response: %w", err)
	}
	return r.result()
}

func (t *rpcTransport) call(ctx context.Context, method string, params any, idemKey string) (json.RawMessage, error) {
	resp, err := t.post(ctx, method, params, "application/json", idemKey)
	if err != nil {
		return nil, err
	}
	return t.readAll(resp)
}

// SendMessage implements a2aclient.Transport: message/send.
func (t *rpcTransport) SendMessage(ctx context.Context, p *sdk.MessageSendParams) (sdk.SendMessageResult, error) {
	res, err := t.call(ctx, "message/send", p, messageKey(p))
	if err != nil {
		return nil, err
	}
	ev, err := sdk.UnmarshalEventJSON(res)
	if err != nil {
		return nil, fmt.Errorf("the answer is no A2A message or task: %w", err)
	}
	switch v := withoutFileBytes(ev).(type) {
	case *sdk.Task:
		return v, nil
	case *sdk.Message:
		return v, nil
	}
	return nil, fmt.Errorf("the answer is a %T, not a message or a task", ev)
}

// CancelTask implements a2aclient.Transport: tasks/cancel.
func (t *rpcTransport) CancelTask(ctx context.Context, p *sdk.TaskIDParams) (*sdk.Task, error) {
	return t.taskCall(ctx, "tasks/cancel", p, "tasks/cancel:"+string(p.ID))
}

// taskCall sends a request whose answer is a task.
func (t *rpcTransport) taskCall(ctx context.Context, method string, params any, idemKey string) (*sdk.Task, error) {
	res, err := t.call(ctx, method, params, idemKey)
	if err != nil {
		return nil, err
	}
	var task sdk.Task
	if err := json.Unmarshal(res, &task); err != nil {
		return nil, fmt.Errorf("the answer is no A2A task: %w", err)
	}
	withoutFileBytes(&task)
	return &task, nil
}

// SendStreamingMessage implements a2aclient.Transport: message/stream, whose
// answer is a stream of server-sent events, or one JSON-RPC response (an error
// answered before the stream began).
func (t *rpcTransport) SendStreamingMessage(ctx context.Context, p *sdk.MessageSendParams) iter.Seq2[sdk.Event, error] {
	return func(yield func(sdk.Event, error) bool) {
		resp, err := t.post(ctx, "message/stream", p, "text/event-stream", messageKey(p))
		if err != nil {
			yield(nil, err)
			return
		}
		if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
			res, err := t.readAll(resp)
			if err != nil {
				yield(nil, err)
				return
			}
			ev, err := sdk.UnmarshalEventJSON(res)
			if err != nil {
				err = fmt.Errorf("the answer is no A2A event: %w", err)
			}
			yield(withoutFileBytes(ev), err)
			return
		}
		defer resp.Body.Close()
		// The stream as a whole is bounded: its file parts' bytes, which the
		// answer does not keep, flow through it all the same.
		body := &rawBound{r: resp.Body, left: int64(t.maxRaw), max: t.maxRaw}
		for data, err := range sseData(body, t.maxRaw) {
			if err != nil {
				yield(nil, err)
				return
			}
			var r rpcResponse
			if err := json.Unmarshal(data, &r); err != nil {
				yield(nil, fmt.Errorf("an event of the stream is not a JSON-RPC response: %w", err))
				return
			}
			res, err := r.result()
			if err != nil {
				yield(nil, err)
				return
			}
			ev, err := sdk.UnmarshalEventJSON(res)
			if err != nil {
				yield(nil, fmt.Errorf("an event of the stream is no A2A event: %w", err))
				return
			}
			if !yield(withoutFileBytes(ev), nil) {
				return
			}
		}
	}
}

// sseData yields the data of each event of a server-sent event stream (its data
// lines joined by newlines), each of at most max bytes.
func sseData(body io.Reader, max int) iter.Seq2[[]byte, error] {
	return func(yield func([]byte, error) bool) {
		r := bufio.NewReaderSize(body, 64<<10)
		var data []byte
		has := false
		for {
			line, err := readLine(r, max)
			if err != nil {
				if errors.Is(err, io.EOF) {
					if has {
						yield(data, nil)
					}
					return
				}
				if !errors.Is(err, ErrAnswerTooLarge) {
					err = fmt.Errorf("the stream broke: %w", err)
				}
				yield(nil, err)
				return
			}
			if len(line) == 0 { // the end of an event
				if has && !yield(data, nil) {
					return
				}
				data, has = data[:0], false
				continue
			}
			field, value, _ := bytes.Cut(line, []byte(":"))
			if string(field) != "data" {
				continue // a comment (keep-alive), an id, an event name, a retry
			}
			value = bytes.TrimPrefix(value, []byte(" "))
			if has {
				data = append(data, '\n')
			}
			if len(data)+len(value) > max {
				yield(nil, rawTooLarge(max))
				return
			}
			data, has = append(data, value...), true
		}
	}
}

// readLine reads one line of at most max bytes, without its end (\n, \r\n).
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		frag, err := r.ReadSlice('\n')
		if len(line)+len(frag) > max+2 {
			return nil, rawTooLarge(max)
		}
		line = append(line, frag...)
		switch {
		case err == nil:
			return bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r")), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			return nil, fmt.Errorf("in the middle of an event: %w", io.ErrUnexpectedEOF)
		default:
			return nil, err
		}
	}
}

// rawBound reads r, failing (rawTooLarge) past left bytes.
type rawBound struct {
	r    io.Reader
	left int64
	max  int
}

func (b *rawBound) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, rawTooLarge(b.max)
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.r.Read(p)
	if b.left -= int64(n); b.left < 0 {
		return n, rawTooLarge(b.max)
	}
	return n, err
}

// GetTask implements a2aclient.Transport: tasks/get, which follows a task still
// running when its message's answer came (Tool.follow).
func (t *rpcTransport) GetTask(ctx context.Context, p *sdk.TaskQueryParams) (*sdk.Task, error) {
	return t.taskCall(ctx, "tasks/get", p, "")
}

// The methods the tool does not send.

func (t *rpcTransport) ResubscribeToTask(context.Context, *sdk.TaskIDParams) iter.Seq2[sdk.Event, error] {
	return func(yield func(sdk.Event, error) bool) { yield(nil, errNotSent) }
}

func (t *rpcTransport) GetTaskPushConfig(context.Context, *sdk.GetTaskPushConfigParams) (*sdk.TaskPushConfig, error) {
	return nil, errNotSent
}

func (t *rpcTransport) ListTaskPushConfig(context.Context, *sdk.ListTaskPushConfigParams) ([]*sdk.TaskPushConfig, error) {
	return nil, errNotSent
}

func (t *rpcTransport) SetTaskPushConfig(context.Context, *sdk.TaskPushConfig) (*sdk.TaskPushConfig, error) {
	return nil, errNotSent
}

func (t *rpcTransport) DeleteTaskPushConfig(context.Context, *sdk.DeleteTaskPushConfigParams) error {
	return errNotSent
}

func (t *rpcTransport) GetAgentCard(context.Context) (*sdk.AgentCard, error) { return nil, errNotSent }

func (t *rpcTransport) Destroy() error { return nil }
