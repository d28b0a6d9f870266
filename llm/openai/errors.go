package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/troupe-run/troupe/internal/textclip"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/redact"
)

// Errors of this package. Each wraps into a longer message naming the provider and
// model; test with errors.Is.
var (
	// ErrMalformedResponse means the provider answered with a body this client cannot
	// understand (invalid JSON, no choices, an event stream that is not one). It is not
	// transient: the same request tends to get the same answer, so the gateway should
	// fall back rather than retry.
	ErrMalformedResponse = errors.New("llm/openai: malformed response")
	// ErrTruncatedStream means an event stream ended (the connection closed) before
	// the provider finished the answer: a finish_reason for every choice. It also
	// wraps llm.ErrTransient.
	ErrTruncatedStream = errors.New("llm/openai: stream ended before the answer was complete")
	// ErrStalledStream means a response sent nothing for Config.StreamIdleTimeout,
	// its connection open, before its answer was complete: the provider stalled,
	// as one whose connection dropped. It also wraps llm.ErrTransient.
	ErrStalledStream = errors.New("llm/openai: stream stalled")
	// ErrInvalidRequest means the request cannot be sent as it is (a tool message
	// without a tool_call_id, a tool schema that is not JSON, ...). Not transient.
	ErrInvalidRequest = errors.New("llm/openai: invalid request")
)

// errCallTimeout is the cause of a call context that ran past Config.Timeout.
var errCallTimeout = errors.New("llm/openai: call timeout")

// maxErrorBody bounds how much of an error response is read.
const maxErrorBody = 64 << 10

// maxRetryAfter caps a provider's Retry-After hint (it also keeps absurd values from
// overflowing a time.Duration).
const maxRetryAfter = 24 * time.Hour

// exchange records what happened on the wire during one call, so that errors can be
// classified by what the server did rather than by the text of the SDK's errors. It is
// installed as SDK middleware; the SDK makes exactly one attempt (no retries).
type exchange struct {
	mu   sync.Mutex
	sent bool
	// wrote says the whole request went out: the provider may have taken the prompt.
	wrote   bool
	status  int
	header  http.Header
	body    []byte // the body of an error response, or of a success that is not JSON (bounded)
	readErr error  // a transport error while reading a successful response's body
	// notJSON is the Content-Type of a successful response that is neither JSON nor
	// an event stream (an HTML page of a proxy or of a base URL that is not the
	// API's): the SDK refuses it with a message about Go types.
	notJSON string
	// limit, when positive, bounds a successful response's body (maxAnswerBytes
	// for a chat answer, embeddingsBound for embeddings); tooLarge says the body
	// went past it.
	limit    int64
	tooLarge bool
	// head is the start of a successful answer's body as it was read, to say what
	// came when it does not parse.
	head []byte
	// idle, when positive, bounds the wait for each read of a successful
	// response's body once arm was called; stall is then called once, when a
	// read waited longer (it ends the request), and stalled records it.
	idle    time.Duration
	stall   func()
	stalled bool
	// answer is the successful response's body, as it is read.
	answer *watchedBody
	// tail is the end of a whole (JSON) answer's body as it was read (at most
	// 2*maxTail, the last maxTail at least), where cutSpend looks for the usage
	// the provider reported when the body does not arrive whole.
	tail []byte
}

// maxTail bounds exchange.tail: a usage object is a few hundred bytes, near a
// chat completion's end.
const maxTail = 64 << 10

// maxHead bounds exchange.head.
const maxHead = 1 << 10

// maxAnswerBytes bounds the body of a chat answer, streamed or whole: far above
// any model's output limit (128k tokens streamed in chunks of some 250 bytes is
// about 32 MiB), it stops a server that sends without end before it fills the
// memory.
var maxAnswerBytes int64 = 64 << 20 // a variable for tests

var errAnswerTooLarge = errors.New("the answer is too large")

// maxVectorBytes is what the bound of an embeddings answer grows by for each text
// of its batch: a vector of some 10,000 dimensions written as JSON numbers.
var maxVectorBytes int64 = 256 << 10 // a variable for tests

// embeddingsBound bounds the body of the embeddings of a batch of n texts.
func embeddingsBound(n int) int64 { return maxAnswerBytes + int64(n)*maxVectorBytes }

// sizeInWords is a bound in bytes in words.
func sizeInWords(n int64) string {
	if n >= 1<<20 {
		return strconv.FormatInt(n>>20, 10) + " MiB"
	}
	return strconv.FormatInt(n>>10, 10) + " KiB"
}

func (x *exchange) middleware(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	x.mu.Lock()
	x.sent = true
	x.mu.Unlock()
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		WroteRequest: func(w httptrace.WroteRequestInfo) {
			if w.Err == nil {
				x.mu.Lock()
				x.wrote = true
				x.mu.Unlock()
			}
		},
	}))
	res, err := next(req)
	if err != nil || res == nil {
		return res, err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.status = res.StatusCode
	x.header = res.Header.Clone()
	if res.StatusCode >= 400 {
		b, _ := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
		_ = res.Body.Close()
		x.body = b
		res.Body = io.NopCloser(bytes.NewReader(b))
		return res, nil
	}
	if ct := res.Header.Get("Content-Type"); !answerType(ct) {
		b, _ := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
		_ = res.Body.Close()
		x.body, x.notJSON = b, ct
		res.Body = io.NopCloser(bytes.NewReader(b))
		return res, nil
	}
	x.answer = &watchedBody{rc: res.Body, x: x, left: x.limit, whole: !isEventStream(res.Header.Get("Content-Type"))}
	res.Body = x.answer
	return res, nil
}

// arm starts the idle bound of the answer's body (exchange.idle), once: the
// caller saw the answer begin. Until then the body may send nothing for as long
// as the request's own timeout allows (a model that reasons in silence before
// its first token). Without a body or a bound it does nothing.
func (x *exchange) arm() {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.idle <= 0 || x.stall == nil || x.answer == nil || x.answer.idle != nil || x.answer.closed {
		return
	}
	x.answer.idle = time.AfterFunc(x.idle, func() {
		x.mu.Lock()
		x.stalled = true
		x.mu.Unlock()
		x.stall()
	})
}

// answerType reports whether a successful response of Content-Type ct can be an
// answer: JSON (application/json, any +json), an event stream, or no type at all.
func answerType(ct string) bool {
	if ct == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasSuffix(mt, "+json") || mt == "text/event-stream"
}

func (x *exchange) snapshot() (sent bool, status int, header http.Header, body []byte, readErr error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.sent, x.status, x.header, x.body, x.readErr
}

// wrongType returns the Content-Type of a successful response that was not JSON,
// and the head of its body.
func (x *exchange) wrongType() (ct string, body []byte) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.notJSON, x.body
}

// watchedBody records transport errors (resets, unexpected EOF, timeouts) while the
// SDK reads a successful response, to tell a dropped connection (transient) from a
// body that arrived whole but does not parse (malformed).
type watchedBody struct {
	rc   io.ReadCloser
	x    *exchange
	left int64 // bytes it may still read, when x.limit is set
	// headRead is how much of the body x.head holds (at most maxHead).
	headRead int
	// idle runs while the body sends nothing, for x.idle, once x.arm started it
	// (nil before, or for no bound); closed is set by Close. Both under x.mu.
	idle   *time.Timer
	closed bool
	// whole marks a body that is no event stream: its end is kept (x.tail).
	whole bool
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.x.mu.Lock()
	if b.idle != nil {
		switch {
		case err != nil:
			b.idle.Stop()
		case n > 0:
			// Bytes came (a chunk, a keepalive comment): the bound counts the
			// wait for the next ones only.
			b.idle.Reset(b.x.idle)
		}
	}
	b.x.mu.Unlock()
	if k := min(n, maxHead-b.headRead); k > 0 {
		b.x.mu.Lock()
		b.x.head = append(b.x.head, p[:k]...)
		b.x.mu.Unlock()
		b.headRead += k
	}
	if b.whole && n > 0 {
		b.x.mu.Lock()
		b.x.keepTail(p[:n])
		b.x.mu.Unlock()
	}
	if b.x.limit > 0 {
		if b.left -= int64(n); b.left < 0 {
			b.x.mu.Lock()
			b.x.tooLarge = true
			b.x.mu.Unlock()
			return 0, errAnswerTooLarge
		}
	}
	if err != nil && err != io.EOF {
		b.x.mu.Lock()
		if b.x.readErr == nil {
			b.x.readErr = err
		}
		b.x.mu.Unlock()
	}
	return n, err
}

// keepTail adds p to x.tail, which keeps at most 2*maxTail bytes and always the
// last maxTail. Under x.mu.
func (x *exchange) keepTail(p []byte) {
	if len(p) >= maxTail {
		x.tail = append(x.tail[:0], p[len(p)-maxTail:]...)
		return
	}
	if len(x.tail)+len(p) > 2*maxTail {
		x.tail = append(x.tail[:0], x.tail[len(x.tail)-(maxTail-len(p)):]...)
	}
	x.tail = append(x.tail, p...)
}

func (b *watchedBody) Close() error {
	b.x.mu.Lock()
	b.closed = true
	if b.idle != nil {
		b.idle.Stop()
	}
	b.x.mu.Unlock()
	return b.rc.Close()
}

// caller identifies a call in error messages.
type caller struct {
	provider, model, apiKey string
	callTimeout             time.Duration
}

func (c caller) errorf(op, format string, args ...any) error {
	return fmt.Errorf("llm/openai: %s %s: %s: "+format, append([]any{c.provider, c.model, op}, args...)...)
}

// classify turns an SDK error into this package's errors: *llm.APIError for HTTP
// errors, ErrTransient for timeouts and dropped connections, the caller's context
// error when the caller gave up, ErrMalformedResponse otherwise.
func (c caller) classify(op string, parent, call context.Context, x *exchange, err error) error {
	err = withoutQueryValues(err)
	sent, status, header, body, readErr := x.snapshot()
	x.mu.Lock()
	tooLarge, stalled := x.tooLarge, x.stalled
	x.mu.Unlock()
	switch {
	case tooLarge:
		return c.tooLarge(op, x.limit)
	case stalled && parent.Err() == nil && context.Cause(call) != errCallTimeout:
		return c.errorf(op, "%w: nothing came for %s: %w", ErrStalledStream, x.idle, llm.ErrTransient)
	case status == http.StatusNotFound:
		return fmt.Errorf("llm/openai: %s: %w (the model is not served there, or the base URL is not the API's: it is the URL the API's paths follow, such as https://host/v1)",
			op, c.apiError(status, header, body, err))
	case status >= 400:
		return fmt.Errorf("llm/openai: %s: %w", op, c.apiError(status, header, body, err))
	case context.Cause(call) == errCallTimeout && parent.Err() == nil:
		return c.timeout(op)
	case parent.Err() != nil:
		return c.errorf(op, "%w", parent.Err())
	case !sent:
		return c.errorf(op, "%w: %w", ErrInvalidRequest, err)
	case status == 0, readErr != nil:
		return c.errorf(op, "%w: %w", llm.ErrTransient, err)
	}
	if ct, head := x.wrongType(); ct != "" {
		return c.notJSON(op, status, ct, head)
	}
	x.mu.Lock()
	head := x.head
	x.mu.Unlock()
	if !jsonObject(head) {
		return c.notJSON(op, status, header.Get("Content-Type"), head)
	}
	return c.errorf(op, "%w: %w", ErrMalformedResponse, err)
}

// withoutQueryValues returns err with every value of the query of the URL its
// *url.Error names replaced by redact.Redacted. Go's HTTP client names the whole
// URL of the request in a transport error ("Post \"https://host/v1/...?key=...\":
// dial tcp ...: connection refused"), and the query of the base URL may hold a
// secret under any name (?key=, Azure Functions' ?code=, a signature), so no
// value is kept. The *url.Error is the client's, made for this one request.
func withoutQueryValues(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		ue.URL = redact.QueryValues(ue.URL, nil)
	}
	return err
}

// notJSON is the error of a successful response that is not JSON, of Content-Type
// ct, whose body begins with head: an HTML page of a proxy or of a base URL that is
// not the API's, whatever Content-Type it claims.
func (c caller) notJSON(op string, status int, ct string, head []byte) error {
	return c.errorf(op, "%w: the server answered HTTP %d with Content-Type %q, not JSON (is the base URL the API's, such as https://host/v1?): %q",
		ErrMalformedResponse, status, c.quote(ct), c.quote(strings.Join(strings.Fields(string(head)), " ")))
}

// isEventStream reports whether Content-Type ct is an event stream's.
func isEventStream(ct string) bool {
	mt, _, _ := mime.ParseMediaType(ct)
	return mt == "text/event-stream"
}

// jsonObject reports whether body begins as a JSON object does; an answer that does
// not is no answer whatever it says it is.
func jsonObject(body []byte) bool {
	body = bytes.TrimLeft(body, " \t\r\n\ufeff")
	return len(body) > 0 && body[0] == '{'
}

// errorObject is the error of a successful response whose body is an error object,
// as some servers answer a failure with HTTP 200: {"error": ...} (proxies, routers)
// or vLLM's bare {"object":"error","message","type","code"}; or of such an event in
// a stream (at says which: inBody, firstEvent, midStream). where says which ("the
// provider answered with an error"). Its message is the provider's (the key
// redacted). It is nil when body is no error object.
//
// A whole body whose code is an HTTP status (400 to 599: vLLM's are) is an
// *llm.APIError of that status, transient or not as an HTTP error of that status
// is: a request the server refused before it answered is not sent again. So is an
// event that is a stream's first (before any chunk): the server refused the
// request before it answered any of it; but for code 400, which is transient as
// mid-stream. vLLM sends an event of code 400 for every exception of its stream
// generator, and sends its first chunk with the request's first token: an engine
// that died before it ("EngineCore encountered an issue.", which vLLM's
// non-streaming answer reports with HTTP 500) is a 400 first event, while a
// request it refuses (a prompt too long, a template that fails) is refused before
// the stream, with HTTP 400. An event mid-stream is a failure after the server
// took the request and began answering: vLLM reports every exception of its
// stream generator so, with code 400 ("Background loop has errored already." of
// an engine that crashed). It is transient, and an *llm.APIError only when its
// code is one the gateway acts on or that is transient anyway: a key refused
// (401, 403: not retried), a rate limit (429: its cooldown), 408, 409 and 5xx.
// Without such a code it is transient, as a failure upstream of a proxy tends to
// be.
func (c caller) errorObject(op, where string, body []byte, at errorAt) error {
	var shaped struct {
		Error  json.RawMessage `json:"error"`
		Object string          `json:"object"`
	}
	if json.Unmarshal(body, &shaped) != nil {
		return nil
	}
	if (len(shaped.Error) == 0 || bytes.Equal(shaped.Error, []byte("null"))) && shaped.Object != "error" {
		return nil
	}
	msg := c.errorMessage(body)
	code, word := errorCodes(body)
	if code == 0 {
		return c.errorf(op, "%s: %s: %w", where, msg, llm.ErrTransient)
	}
	api := &llm.APIError{Provider: c.provider, Model: c.model, StatusCode: code, Message: msg, Code: c.hide(word)}
	if (at == midStream || at == firstEvent && code == http.StatusBadRequest) && !api.Transient() && code != http.StatusUnauthorized && code != http.StatusForbidden && code != http.StatusTooManyRequests {
		return c.errorf(op, "%s (code %d): %s: %w", where, code, msg, llm.ErrTransient)
	}
	return c.errorf(op, "%s (code %d) with HTTP 200: %w", where, code, api)
}

// errorAt says where an error object came (errorObject).
type errorAt int

const (
	inBody     errorAt = iota // the whole body of a successful response
	firstEvent                // a stream's event, before any chunk
	midStream                 // a stream's event, after a chunk
)

// tooLarge is the error of an answer past its bound, limit bytes.
func (c caller) tooLarge(op string, limit int64) error {
	return c.errorf(op, "%w: the answer is larger than %s, more than any model writes (is the base URL a model API's?)", ErrMalformedResponse, sizeInWords(limit))
}

func (c caller) timeout(op string) error {
	return c.errorf(op, "no complete answer within %s: %w (%w)", c.callTimeout, llm.ErrTransient, context.DeadlineExceeded)
}

// apiError builds the gateway-facing error for an HTTP error response.
func (c caller) apiError(status int, header http.Header, body []byte, sdkErr error) *llm.APIError {
	msg := ""
	var e *sdk.Error
	if errors.As(sdkErr, &e) && e.Message != "" {
		msg = c.quote(e.Message)
	} else {
		msg = c.errorMessage(body)
	}
	return &llm.APIError{
		Provider:   c.provider,
		Model:      c.model,
		StatusCode: status,
		RetryAfter: retryAfter(status, header, time.Now()),
		Message:    msg,
		Code:       c.hide(errorCode(body)),
	}
}

// errorCode is the code of an error body shaped {"error": {"code", "type"}} (or
// vLLM's {"object": "error", "code", "type"}): its code, else its type (a short
// word, else none).
func errorCode(body []byte) string {
	_, word := errorCodes(body)
	return word
}

// errorCodes reads the code of an error body shaped {"error": {"code", "type"}}, or
// {"code", "type"} at its top (vLLM's {"object": "error"}): status is the code
// when it is an HTTP error status (400 to 599, a number or a string of digits),
// else 0; word is the code when it is a string, else the type (a short word, else
// none).
func errorCodes(body []byte) (status int, word string) {
	type fields struct {
		Code json.RawMessage `json:"code"`
		Type json.RawMessage `json:"type"`
	}
	var shaped struct {
		fields
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &shaped) != nil {
		return 0, ""
	}
	f := shaped.fields
	var inner fields
	if json.Unmarshal(shaped.Error, &inner) == nil && (inner.Code != nil || inner.Type != nil) {
		f = inner
	}
	if n, err := strconv.Atoi(strings.Trim(string(bytes.TrimSpace(f.Code)), `"`)); err == nil && n >= 400 && n <= 599 {
		status = n
	}
	if json.Unmarshal(f.Code, &word) != nil || word == "" {
		word = ""
		if json.Unmarshal(f.Type, &word) != nil {
			word = ""
		}
	}
	if len(word) > 64 {
		word = ""
	}
	return status, word
}

// errorMessage extracts a human-readable message from an error body in any of the
// shapes OpenAI-compatible servers use: {"error":{"message":...}}, {"error":"..."},
// {"message":...}, {"detail":...}, or plain text; quoted (c.quote: redacted, then
// clipped).
func (c caller) errorMessage(body []byte) string {
	var shaped struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(body, &shaped) == nil {
		var inner struct {
			Message string `json:"message"`
		}
		var s string
		switch {
		case json.Unmarshal(shaped.Error, &inner) == nil && inner.Message != "":
			return c.quote(inner.Message)
		case json.Unmarshal(shaped.Error, &s) == nil && s != "":
			return c.quote(s)
		case shaped.Message != "":
			return c.quote(shaped.Message)
		case json.Unmarshal(shaped.Detail, &s) == nil && s != "":
			return c.quote(s)
		case len(shaped.Detail) > 0:
			return c.quote(string(shaped.Detail))
		}
	}
	return c.quote(strings.Join(strings.Fields(string(body)), " "))
}

// hide is s with the API key and credential-shaped strings replaced by
// redact.Redacted.
func (c caller) hide(s string) string { return redact.New(c.apiKey).String(s) }

// quote is s as an error quotes it: redacted (hide), then clipped. Clipped first,
// a secret across the cut would keep its head, which no redaction recognizes.
func (c caller) quote(s string) string { return clip(c.hide(s)) }

// clip shortens a message to a log-friendly length (textclip.Head: 300 bytes, cut
// between characters), each run of bytes that are not UTF-8 replaced by U+FFFD
// first: a provider's message with a stray byte keeps its text.
func clip(s string) string {
	return textclip.Head(strings.ToValidUTF8(s, "\uFFFD"), 300)
}

// retryAfter reads a provider's retry hint: retry-after-ms, then Retry-After (seconds
// or an HTTP date, relative to now), then, for 429 only, OpenAI's
// x-ratelimit-reset-{requests,tokens} for whichever limit is exhausted. 0 means no hint.
func retryAfter(status int, h http.Header, now time.Time) time.Duration {
	if d, ok := parseSeconds(h.Get("Retry-After-Ms"), time.Millisecond); ok {
		return d
	}
	if v := strings.TrimSpace(h.Get("Retry-After")); v != "" {
		if d, ok := parseSeconds(v, time.Second); ok {
			return d
		}
		if t, err := http.ParseTime(v); err == nil {
			return clampRetry(t.Sub(now))
		}
	}
	if status == http.StatusTooManyRequests {
		for _, kind := range []string{"requests", "tokens"} {
			if h.Get("X-Ratelimit-Remaining-"+kind) != "0" {
				continue
			}
			if d, err := time.ParseDuration(h.Get("X-Ratelimit-Reset-" + kind)); err == nil {
				return clampRetry(d)
			}
		}
	}
	return 0
}

func parseSeconds(v string, unit time.Duration) (time.Duration, bool) {
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || math.IsNaN(f) || f < 0 {
		return 0, false
	}
	if f*float64(unit) > float64(maxRetryAfter) {
		return maxRetryAfter, true
	}
	return time.Duration(f * float64(unit)), true
}

func clampRetry(d time.Duration) time.Duration {
	switch {
	case d < 0:
		return 0
	case d > maxRetryAfter:
		return maxRetryAfter
	}
	return d
}
