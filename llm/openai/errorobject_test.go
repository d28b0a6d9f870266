package openai_test

import (
	"errors"
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
