package a2a

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
)

// maxJSONDepth is how deep encoding/json reads objects and arrays within each
// other (the top-level value counts one): a body nested deeper is refused whole,
// as a syntax error.
const maxJSONDepth = 10000

// deepRequest is what scanDeepRequest reads of a request nested deeper than
// maxJSONDepth.
type deepRequest struct {
	// id is the request's id as it was sent when it is one JSON-RPC allows (a
	// string, a number, null), else nil.
	id any
	// method is the request's method, "" when it names none.
	method string
	// member is the first top-level member nested too deep, depth how deep the
	// body nests there.
	member string
	depth  int
}

// tooDeep says whether err, encoding/json's error for a body, is that the body
// nests deeper than maxJSONDepth: it reports the first error it finds, so no
// other body can be one scanDeepRequest reads, and the scan (which allocates
// some tens of bytes for each token) is spared the bodies that are not JSON.
func tooDeep(err error) bool {
	var syntax *json.SyntaxError
	return errors.As(err, &syntax) && strings.Contains(syntax.Error(), "exceeded max depth")
}

// scanDeepRequest reads a body that encoding/json refused (with err) for its
// depth with a token scan, which bounds no depth: ok says the body is one JSON
// object, valid but for its depth, of which a member nests deeper than
// maxJSONDepth. Its id can then be answered, where a parse error's is null.
func scanDeepRequest(body []byte, err error) (deepRequest, bool) {
	var req deepRequest
	if !tooDeep(err) {
		return req, false
	}
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber() // a number float64 cannot hold (1e400) is valid JSON all the same
	if tok, err := d.Token(); err != nil || tok != json.Delim('{') {
		return req, false
	}
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			return req, false
		}
		key, _ := tok.(string)
		depth, deepest := 0, 0
		var first json.Token
		start := d.InputOffset()
		for i := 0; i == 0 || depth > 0; i++ {
			tok, err := d.Token()
			if err != nil {
				return req, false
			}
			if i == 0 {
				first = tok
			}
			switch tok {
			case json.Delim('{'), json.Delim('['):
				depth++
				deepest = max(deepest, depth)
			case json.Delim('}'), json.Delim(']'):
				depth--
			}
		}
		switch key {
		case "id":
			switch first.(type) {
			case nil, string, json.Number:
				// Echoed as sent: 1.0, 1e400 and 12345678901234567890 are not
				// float64's 1, an error and 12345678901234567000.
				req.id = json.RawMessage(bytes.TrimLeft(body[start:d.InputOffset()], " \t\r\n:"))
			default:
				req.id = nil
			}
		case "method":
			req.method, _ = first.(string)
		}
		if 1+deepest > maxJSONDepth && req.member == "" {
			req.member, req.depth = key, 1+deepest
		}
	}
	if tok, err := d.Token(); err != nil || tok != json.Delim('}') {
		return req, false
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return req, false // more than one value
	}
	return req, req.member != ""
}
