package main

import (
	"errors"
	"strings"
	"testing"
)

// A header that counts no events, or fewer than none, is refused on line 1 for
// what it says. Before, the file was read against the count: -1 events took the
// session's events for more than it promised and ended on a configuration said
// to be another session's event, and 0 events took the first event for a
// configuration.
func TestImportRefusesAHeaderThatCountsNoEvents(t *testing.T) {
	const event = `{"id":"s/1","session_id":"s","seq":1,"type":"task.submitted","v":1,"ts":1,"actor":"ingress","payload":{"input":"hi"}}`
	for _, n := range []string{"-1", "0"} {
		file := `{"format":"troupe.session","version":2,"session_id":"s","events":` + n + `,"configs":0}` + "\n" + event + "\n"
		_, _, err := readExport(strings.NewReader(file))
		if !errors.Is(err, ErrBadExport) || !strings.Contains(err.Error(), "line 1: "+n+" events") {
			t.Errorf("a header of %s events: %v; want an error saying line 1 counts %s events", n, err, n)
		}
	}
}
