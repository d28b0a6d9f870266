package mcp

import "testing"

// msgScan finds a request's top-level id however the message is cut in pieces,
// and, for the server (newRequestIDScan), nothing but a string or a number.
func TestIDScan(t *testing.T) {
	for msg, want := range map[string]string{
		`{"jsonrpc":"2.0","id":7,"method":"x"}`:                   `7`,
		`{"method":"x","params":{"id":1,"a":["}"]},"id":"a\"b}"}`: `"a\"b}"`,
		`{ "id" : -12 }`:               `-12`,
		`{"idx":1,"xid":2,"id":3}`:     `3`,
		`{"id":null,"method":"x"}`:     ``,
		`{"id":{"a":1}}`:               ``,
		`{"id":[1]}`:                   ``,
		`{"id":true}`:                  ``,
		`[{"id":1}]`:                   ``,
		`{"params":{"s":"\\","id":1}}`: ``,
		`{"params":"` + string(make([]byte, 10)) + `","id":"tail"}`: `"tail"`,
	} {
		for _, step := range []int{1, 3, len(msg)} {
			s := newRequestIDScan()
			for i := 0; i < len(msg); i += step {
				s.write([]byte(msg[i:min(i+step, len(msg))]))
			}
			if got := string(s.result()); got != want {
				t.Errorf("%q in pieces of %d: id %q, want %q", msg, step, got, want)
			}
		}
	}
}
