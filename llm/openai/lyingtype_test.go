package openai_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/openai"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
)

// A page that is not JSON says what came, the head of the body with its status and
// Content-Type, whatever Content-Type it claims (a captive portal or a proxy that
// labels its HTML application/json) and whether the call streams: it said
// "invalid character '<' looking for beginning of value", or, streamed, only the
// Content-Type.
func TestAnswerThatIsNotJSONSaysWhatCameWhateverItsType(t *testing.T) {
	page := "<html><body>Sign in to the Wi-Fi, key " + testKey + "</body></html>"
	for _, c := range []struct {
		name, ct string
		stream   bool
	}{
		{"labelled json", "application/json", false},
		{"labelled json, streamed", "application/json", true},
		{"html, streamed", "text/html", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Reply{Header: map[string]string{"Content-Type": c.ct}, Body: page}))
			m := newModel(t, srv)
			var err error
			if c.stream {
				_, err = m.Stream(deadline(t), hello(), nil)
			} else {
				_, err = m.Generate(deadline(t), hello())
			}
			if !errors.Is(err, openai.ErrMalformedResponse) || errors.Is(err, llm.ErrTransient) ||
				!strings.Contains(err.Error(), `answered HTTP 200 with Content-Type "`+c.ct+`", not JSON`) ||
				!strings.Contains(err.Error(), `"<html><body>Sign in to the Wi-Fi, key [REDACTED]</body></html>"`) || strings.Contains(err.Error(), testKey) {
				t.Fatalf("%v", err)
			}
		})
	}
}
