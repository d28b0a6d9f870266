//go:build review

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
// completion without choices that the gateway would never retry.
func TestErrorObjectOfA200IsTheProvidersError(t *testing.T) {
	srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Reply{
		Body: `{"error":{"message":"upstream overloaded for key ` + testKey + `","code":429}}`}))
	_, err := newModel(t, srv).Generate(deadline(t), hello())
	if err == nil || !strings.Contains(err.Error(), "upstream overloaded") || !errors.Is(err, llm.ErrTransient) {
		t.Fatalf("err %v: want the provider's message, transient", err)
	}
	if strings.Contains(err.Error(), testKey) {
		t.Fatalf("err %v prints the key", err)
	}
}
