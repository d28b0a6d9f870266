package openai_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
)

// A provider (a proxy, a router) that answers HTTP 200 with an error object, not a
// completion, is reported as the provider's error, with its message (the key
// redacted) and as transient, as the same error in an event stream is; not as a
// completion without choices that the gateway would never retry. So is the answer
// of a stream that the provider answered whole.
func TestErrorObjectOfA200IsTheProvidersError(t *testing.T) {
	body := `{"error":{"message":"upstream overloaded for key ` + testKey + `","code":429}}`
	srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Reply{Body: body}, openaitest.Reply{Body: body}))
	m := newModel(t, srv)
	_, err := m.Generate(deadline(t), hello())
	_, _, serr := stream(t, m)
	for op, err := range map[string]error{"generate": err, "stream": serr} {
		if err == nil || !strings.Contains(err.Error(), "upstream overloaded") || !errors.Is(err, llm.ErrTransient) {
			t.Errorf("%s: err %v: want the provider's message, transient", op, err)
		}
		if err != nil && strings.Contains(err.Error(), testKey) {
			t.Errorf("%s: err %v prints the key", op, err)
		}
	}
}

// vLLM (and servers built like it) answers a failure with HTTP 200 and a bare error
// object, {"object":"error","message","type","code"}, and a streaming server may
// send an error event mid-stream; the error code says whether a retry may succeed.
// Each is the provider's error with its message, classified by its code as an HTTP
// error is (*llm.APIError): a request the server refused (400) is not retried, an
// overloaded server (503) is; not a completion without choices, nor a stream cut
// short. Mid-stream, a 400 is transient (TestErrorEventMidStreamIsTransient).
func TestErrorObjectIsClassifiedByItsCode(t *testing.T) {
	const msg = "This model's maximum context length is 4096 tokens"
	vllm := func(code int) string {
		return `{"object":"error","message":"` + msg + `","type":"BadRequestError","param":null,"code":` + strconv.Itoa(code) + `}`
	}
	nested := func(code int) string {
		return `{"error":{"object":"error","message":"` + msg + `","type":"BadRequestError","param":null,"code":` + strconv.Itoa(code) + `}}`
	}
	for _, code := range []int{400, 503} {
		replies := map[string]openaitest.Reply{
			"a 200":                   {Body: vllm(code)},
			"a 200 labelled a stream": {Header: map[string]string{"Content-Type": "text/event-stream"}, Body: vllm(code)},
			"an event":                openaitest.Stream(openaitest.RoleChunk(), openaitest.ContentChunk("Hi"), vllm(code)),
			"an error event":          openaitest.Stream(openaitest.RoleChunk(), openaitest.ContentChunk("Hi"), nested(code)),
		}
		for name, reply := range replies {
			srv := openaitest.NewServer(t, openaitest.Sequence(reply, reply))
			m := newModel(t, srv)
			errs := map[string]error{}
			if name == "a 200" {
				_, errs["generate"] = m.Generate(deadline(t), hello())
			}
			_, _, errs["stream"] = stream(t, m)
			for op, err := range errs {
				if code == 400 && strings.HasSuffix(name, "event") {
					if !errors.Is(err, llm.ErrTransient) || !strings.Contains(err.Error(), msg) {
						t.Errorf("code %d in %s: %s: err %v: want the provider's message, transient", code, name, op, err)
					}
					continue
				}
				var api *llm.APIError
				if !errors.As(err, &api) || api.StatusCode != code || !strings.Contains(err.Error(), msg) {
					t.Errorf("code %d in %s: %s: err %v: want the provider's error with its message and code", code, name, op, err)
					continue
				}
				if transient := code >= 500; errors.Is(err, llm.ErrTransient) != transient {
					t.Errorf("code %d in %s: %s: err %v: transient %v, want %v", code, name, op, err, !transient, transient)
				}
			}
		}
	}
}

// vLLM reports every exception of its stream generator as an error event with code
// 400, whatever failed ("Background loop has errored already." of an engine that
// crashed): an error event mid-stream is a failure after the server took the
// request, transient (the gateway retries it), with the provider's message. Its
// code counts only when it says the key was refused (401, 403: not retried) or a
// rate limit (429: transient, an *llm.APIError of 429 that cools the provider
// down). A chunk with no content but the role counts: the server began answering.
// The same object as the whole body of a 200 is classified by its code, and so is
// one that is a stream's first event, but for 400
// (TestErrorEventFirstInAStreamIsClassifiedByItsCode).
func TestErrorEventMidStreamIsTransient(t *testing.T) {
	const msg = "Background loop has errored already."
	event := func(code int) string {
		return `{"error":{"object":"error","message":"` + msg + `","type":"BadRequestError","param":null,"code":` + strconv.Itoa(code) + `}}`
	}
	for _, c := range []struct {
		code      int
		transient bool
		api       bool // an *llm.APIError of code
	}{
		{400, true, false},
		{404, true, false},
		{422, true, false},
		{401, false, true},
		{403, false, true},
		{429, true, true},
		{500, true, true},
	} {
		srv := openaitest.NewServer(t, openaitest.Sequence(
			openaitest.Stream(openaitest.RoleChunk(), openaitest.ContentChunk("Hi"), event(c.code)),
			openaitest.Stream(openaitest.RoleChunk(), event(c.code))))
		m := newModel(t, srv)
		for _, where := range []string{"after a chunk", "after the role chunk"} {
			_, _, err := stream(t, m)
			var api *llm.APIError
			if errors.Is(err, llm.ErrTransient) != c.transient || errors.As(err, &api) != c.api || !strings.Contains(err.Error(), msg) {
				t.Errorf("code %d %s: err %v: want the provider's message, transient %v, an APIError %v", c.code, where, err, c.transient, c.api)
				continue
			}
			if c.api && api.StatusCode != c.code {
				t.Errorf("code %d %s: err %v: want an APIError of %d", c.code, where, err, c.code)
			}
		}
	}
	srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Reply{Body: strings.TrimSuffix(strings.TrimPrefix(event(400), `{"error":`), "}")}))
	_, _, err := stream(t, newModel(t, srv))
	var api *llm.APIError
	if !errors.As(err, &api) || api.StatusCode != 400 || errors.Is(err, llm.ErrTransient) {
		t.Errorf("the whole body of a 200: err %v: want an APIError of 400, not transient", err)
	}
}

// An error event that is a stream's first, before any chunk, is the server's
// answer to the request, as an error response is: it is classified by its code as
// the same object answered whole is. A request refused (404, 422) is not retried,
// a key refused (401, 403) is not either, a rate limit (429) and a server's
// failure (5xx) are; an error with no code is transient. Code 400 is transient, as
// mid-stream: vLLM sends it for every exception of its stream generator, an engine
// that died before the request's first token included ("EngineCore encountered an
// issue."), which its non-streaming answer reports with HTTP 500; a request it
// refuses it refuses before the stream, with HTTP 400.
func TestErrorEventFirstInAStreamIsClassifiedByItsCode(t *testing.T) {
	const msg = "The request was refused."
	for _, c := range []struct {
		code      int
		transient bool
		api       bool // an *llm.APIError of code
	}{
		{400, true, false},
		{404, false, true},
		{422, false, true},
		{401, false, true},
		{403, false, true},
		{429, true, true},
		{503, true, true},
		{0, true, false},
	} {
		code := ""
		if c.code != 0 {
			code = `,"code":` + strconv.Itoa(c.code)
		}
		events := map[string]string{
			"an error event":      `{"error":{"message":"` + msg + `","type":"invalid_request_error"` + code + `}}`,
			"a bare error object": `{"object":"error","message":"` + msg + `","type":"BadRequestError"` + code + `}`,
		}
		for name, event := range events {
			srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Stream(event, openaitest.Done)))
			_, _, err := stream(t, newModel(t, srv))
			var api *llm.APIError
			if errors.Is(err, llm.ErrTransient) != c.transient || errors.As(err, &api) != c.api || !strings.Contains(err.Error(), msg) {
				t.Errorf("code %d in %s: err %v: want the provider's message, transient %v, an APIError %v", c.code, name, err, c.transient, c.api)
				continue
			}
			if c.api && api.StatusCode != c.code {
				t.Errorf("code %d in %s: err %v: want an APIError of %d", c.code, name, err, c.code)
			}
		}
	}
}
