package main

import (
	"errors"
	"strings"
	"testing"
)

// An event whose payload is null is refused, naming its line: a node records
// every payload as an object, and null decodes as an event with no field set (a
// tool call of no tool, with no key), which import stored and a node resuming
// the session would then act on.
func TestImportRefusesAPayloadOfNull(t *testing.T) {
	const header = `{"format":"troupe.session","version":2,"session_id":"s","events":2,"configs":0}`
	const first = `{"id":"s/1","session_id":"s","seq":1,"type":"task.submitted","v":1,"ts":1,"actor":"ingress","payload":{"input":"hi"}}`
	for _, payload := range []string{`null`, ` null `} {
		second := `{"id":"s/2","session_id":"s","seq":2,"type":"tool.requested","v":1,"ts":2,"actor":"session","payload":` + payload + `}`
		_, _, err := readExport(strings.NewReader(header + "\n" + first + "\n" + second + "\n"))
		if !errors.Is(err, ErrBadExport) || !strings.Contains(err.Error(), "line 3") || !strings.Contains(err.Error(), "null") {
			t.Errorf("payload %q: %v; want an error naming line 3 and its null payload", payload, err)
		}
	}
}
