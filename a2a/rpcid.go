package a2a

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
)

// requestID reads the id of a JSON-RPC request, body, as it was sent: the bytes of
// its top-level member named "id", exactly (JSON-RPC's member names are
// case-sensitive: "ID" and "Id" are other members, which encoding/json would take
// for it). JSON-RPC 2.0 answers a request with the id it was sent, and a number
// read as a float64 is not that one: 1.0 came back as 1, 12345678901234567890 as
// 12345678901234567000, and 1e400 was refused. id is nil when the body has no
// such member (or is no JSON object); ok is false when the member is no id (an
// id is a string, a number or null), which is not echoed back: then id is the
// first byte of that member only, enough for rawKind. No member that is an object
// or an array (the params, the bulk of a request) is copied.
func requestID(body []byte) (id json.RawMessage, ok bool) {
	id, ok, _ = readRequestID(body)
	return id, ok
}

// readRequestID is requestID, in the same pass telling a body that is not JSON:
// err is encoding/json's error for it (a *json.SyntaxError, nesting too deep
// among them), the one any json.Unmarshal of body returns, as each checks the
// whole body before it decodes. A body that is JSON but no object has no id,
// and no error: guard reads it as before.
func readRequestID(body []byte) (id json.RawMessage, ok bool, err error) {
	var members map[string]idMember
	if err := json.Unmarshal(body, &members); err != nil {
		var syntax *json.SyntaxError
		if errors.As(err, &syntax) {
			return nil, true, err
		}
		return nil, true, nil
	}
	m, found := members["id"]
	if !found {
		return nil, true, nil
	}
	id = json.RawMessage(m)
	switch c := id[0]; {
	case c == '"', c == 'n', c == '-', c >= '0' && c <= '9':
		return id, true, nil
	}
	return id, false, nil
}

// idMember is a top-level member of a request as requestID keeps it: a copy of a
// string, a number or a literal; of an object or an array ('{', '['), its first
// byte only.
type idMember []byte

func (m *idMember) UnmarshalJSON(b []byte) error {
	if b[0] == '{' || b[0] == '[' {
		b = b[:1]
	}
	*m = append((*m)[:0], b...)
	return nil
}

// rawKind names the JSON type of a value that is no id: a boolean, an array or an
// object.
func rawKind(v json.RawMessage) string {
	switch v[0] {
	case '[':
		return "an array"
	case '{':
		return "an object"
	}
	return "a boolean"
}

// echoID makes the answer to a request of id, sent as it was, whatever the
// handlers after guard (the SDK's, which reads an id as encoding/json does into
// an any) make of it. It returns a body for them and its size, the request with a
// token in place of its id (and the jsonrpc, method and params they read of it,
// by those names: a member named "ID" would be their id), which reads params
// where they are (no copy of them); the token (an id for what guard answers on
// the way, as "id" member of JSON); and w, which writes the id where the answer
// has the token. An id that is null or none needs no token.
func echoID(w http.ResponseWriter, id json.RawMessage, method string, params json.RawMessage) (body io.Reader, size int64, token any, _ http.ResponseWriter) {
	token, sent := any(nil), []byte("null")
	if id != nil && string(id) != "null" {
		t := "a2a-request-id:" + rand.Text()
		token, sent = t, []byte(`"`+t+`"`)
		w = &idWriter{ResponseWriter: w, token: append([]byte(`"id":`), sent...), id: append([]byte(`"id":`), id...)}
	}
	m, _ := json.Marshal(method) // a string marshals
	head := append([]byte(`{"jsonrpc":"2.0","id":`), sent...)
	head = append(append(head, `,"method":`...), m...)
	if len(params) > 0 {
		head = append(head, `,"params":`...)
	}
	size = int64(len(head) + len(params) + 1)
	return io.MultiReader(bytes.NewReader(head), bytes.NewReader(params), strings.NewReader("}")), size, token, w
}

// idWriter writes the id of a request, as it was sent, where the answer has the
// token that stood for it ("id":"a2a-request-id:..."). The handlers it serves
// write each JSON answer, and each event of a stream, in one piece.
type idWriter struct {
	http.ResponseWriter
	token, id []byte // `"id":` and each
}

func (w *idWriter) Write(p []byte) (int, error) {
	if !bytes.Contains(p, w.token) {
		return w.ResponseWriter.Write(p)
	}
	if _, err := w.ResponseWriter.Write(bytes.ReplaceAll(p, w.token, w.id)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush implements http.Flusher, which the SDK's streams require.
func (w *idWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap gives http.ResponseController the underlying writer.
func (w *idWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
