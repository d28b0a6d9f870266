package mcp

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// answers is a connection that reads the results it holds, one a Read.
type answers struct {
	sdk.Connection
	results []string
}

func (a *answers) Read(context.Context) (jsonrpc.Message, error) {
	r := a.results[0]
	a.results = a.results[1:]
	return &jsonrpc.Response{Result: json.RawMessage(r)}, nil
}

// A tool marked task-only is offered again once a later listing of it has no
// "execution" (its server upgraded, or reconnected as another): each listing
// replaces the tool's mark, over stdio, an HTTP JSON answer and an event of a
// stream. The marks were read only from answers holding "taskSupport", so the
// tool stayed left out until the node restarted.
func TestTaskOnlyMarkIsReplacedByALaterListing(t *testing.T) {
	const marked = `{"tools":[{"name":"research","execution":{"taskSupport":"required"}},{"name":"plain"}]}`
	const plain = `{"tools":[{"name":"research"},{"name":"plain"}]}`
	message := func(result string) []byte { return []byte(`{"jsonrpc":"2.0","id":2,"result":` + result + `}`) }
	event := func(result string) []byte {
		return append(append([]byte("event: message\ndata: "), message(result)...), "\n\n"...)
	}
	for name, note := range map[string]func(k *taskOnlyTools, result string){
		"stdio": func(k *taskOnlyTools, result string) {
			c := &stdioConn{Connection: &answers{results: []string{result}}, taskOnly: k}
			if _, err := c.Read(context.Background()); err != nil {
				t.Fatal(err)
			}
		},
		"http-json":   func(k *taskOnlyTools, result string) { k.noteMessage(message(result)) },
		"http-events": func(k *taskOnlyTools, result string) { k.noteEvent(event(result)) },
	} {
		var k taskOnlyTools
		note(&k, marked)
		if !k.required("research") || k.required("plain") {
			t.Fatalf("%s: after the marked listing, research task-only %v, plain %v", name, k.required("research"), k.required("plain"))
		}
		note(&k, plain)
		if k.required("research") {
			t.Errorf("%s: research is still task-only after a listing without its execution", name)
		}
	}
}

// The same listing noted again is not decoded again (its marks would be the same):
// a mark changed in between by hand stays, and a different listing is read.
func TestTaskOnlySameListingIsNotDecodedAgain(t *testing.T) {
	const marked = `{"tools":[{"name":"research","execution":{"taskSupport":"required"}}]}`
	const other = `{"tools":[{"name":"research","execution":{"taskSupport":"required"}},{"name":"plain"}]}`
	var k taskOnlyTools
	k.note([]byte(marked))
	delete(k.names, "research") // what a decode of marked would undo
	k.note([]byte(marked))
	if k.required("research") {
		t.Fatal("the same listing was decoded again")
	}
	k.note([]byte(other))
	if !k.required("research") {
		t.Fatal("a different listing was not read")
	}
}
